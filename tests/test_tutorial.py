"""The tutorial docs/guide/build_your_own.md: its structure (fast) and every command in it, as written (kit)."""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from torch_emu.conformance.runner import discover

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUNNER = ROOT / "scripts" / "run_tutorial.py"
_spec = importlib.util.spec_from_file_location("run_tutorial", RUNNER)
run_tutorial = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_tutorial)

# Issue 13's integration points, in its order: one step each.
STEPS = ["streams and events", "caching allocator", "generator", "native kernels", "autograd", "AMP",
         "serialization", "compile", "distributed", "profiler"]
SCAFFOLD = "bash scripts/conformance.sh"
REFERENCE = "python -m torch_emu conformance"


def chapter_commands():
    return run_tutorial.commands(run_tutorial.CHAPTER.read_text())


def tiers_of(command: str) -> list[str]:
    """The tiers after --tier, up to the comment or the next option."""
    words = command.partition(" #")[0].split()
    if "--tier" not in words:
        return []
    rest = words[words.index("--tier") + 1:]
    return rest[:next((i for i, w in enumerate(rest) if w.startswith("-")), len(rest))]


def test_every_command_is_one_the_runner_understands():
    cmds = chapter_commands()  # raises ValueError naming the line otherwise
    assert cmds[0].text == "python -m torch_emu new mydev --dir mydev"
    assert all(c.expected in (0, 1) for c in cmds)


def test_steps_are_the_integration_points_in_order():
    headings = re.findall(r"^## Step (\d+): (.+)$", run_tutorial.CHAPTER.read_text(), flags=re.M)
    assert [int(n) for n, _ in headings] == list(range(len(STEPS) + 1))
    assert [title.lower() for _, title in headings[1:]] == [s.lower() for s in STEPS]


def test_every_step_names_existing_tiers_failing_before_and_passing_on_the_reference():
    known = {t.name for t in discover([])}
    by_step = {}
    for cmd in chapter_commands():
        step = re.match(r"Step (\d+)", cmd.heading)
        if step:
            by_step.setdefault(int(step.group(1)), []).append(cmd)
    assert sorted(by_step) == list(range(len(STEPS) + 1))
    step0 = [c for c in by_step[0] if c.text.startswith(SCAFFOLD) and tiers_of(c.text)]
    assert tiers_of(step0[0].text) == ["device", "memory", "generator", "operators"] and step0[0].expected == 0
    for n in range(1, len(STEPS) + 1):
        scaffold = [c for c in by_step[n] if c.text.startswith(SCAFFOLD)]
        reference = [c for c in by_step[n] if REFERENCE in c.text]
        assert len(scaffold) == 1 and reference, f"step {n} needs one check on the scaffold and one on emu"
        tiers = tiers_of(scaffold[0].text)
        assert tiers and set(tiers) <= known, f"step {n} names tiers {tiers}; known: {sorted(known)}"
        assert scaffold[0].expected == 1, f"step {n}: its tier should fail on the fresh scaffold"
        for ref in reference:
            assert tiers_of(ref.text) == tiers and ref.expected == 0, f"step {n}: {ref.text}"


def write(tmp_path, body: str) -> str:
    path = tmp_path / "chapter.md"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_runner_keeps_one_session_and_checks_statuses(tmp_path, capfd):
    chapter = write(tmp_path, """\
        # A chapter
        ```bash
        mkdir sub && cd sub
        export GREETING=hello   # state carries over to the next block
        ```
        ```python
        raise SystemExit(3)  # not run: not bash
        ```
        ## Later
        ```bash
        test "$GREETING" = hello && test "$(basename "$PWD")" = sub
        false   # exits 1
        bash -c 'exit 3'   # exits 3: any status can be expected
        ```
        """)
    assert [c.expected for c in run_tutorial.commands(open(chapter).read())] == [0, 0, 0, 1, 3]
    assert run_tutorial.main([chapter]) == 0
    assert run_tutorial.main([chapter, "--from", "Later", "--workdir", str(tmp_path)]) == 1  # GREETING unset
    capfd.readouterr()


@pytest.mark.parametrize("body, status", [
    ("true   # exits 1\n", "exited 0, expected 1"),
    ("false\n", "exited 1, expected 0"),
])
def test_runner_stops_at_an_unexpected_status(tmp_path, capfd, body, status):
    chapter = write(tmp_path, f"```bash\n{body}touch should-not-exist\n```\n")
    assert run_tutorial.main([chapter, "--workdir", str(tmp_path)]) == 1
    assert status in capfd.readouterr().err
    assert not (tmp_path / "should-not-exist").exists()


@pytest.mark.parametrize("line", [
    "make \\", "cat <<EOF", "for f in *; do", "if true; then", "exit 0", "false   # exits one",
    "false   # fails, exits 1",
])
def test_runner_rejects_lines_it_cannot_run_one_by_one(line):
    with pytest.raises(ValueError, match="line 2"):
        run_tutorial.commands(f"```bash\n{line}\n```\n")


@pytest.mark.kit
def test_whole_chapter_runs():
    """Generates and builds a backend with the scaffold, then runs every command of the chapter."""
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    r = subprocess.run([sys.executable, str(RUNNER)], capture_output=True, text=True, env=env, timeout=3600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-20000:]
