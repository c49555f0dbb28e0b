"""The tutorial docs/guide/build_your_own.md: its structure (fast) and every command in it, as written (kit)."""

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from torch_emu_kit import tutorial
from torch_emu_kit.cli import main
from torch_emu_kit.conformance.runner import discover

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "docs" / "guide" / "build_your_own.md"

# Issue 13's integration points, in its order: one step each.
STEPS = ["streams and events", "caching allocator", "generator", "native kernels", "autograd", "AMP",
         "serialization", "compile", "distributed", "profiler"]
SCAFFOLD = "bash scripts/conformance.sh"
REFERENCE = "python -m torch_emu conformance"


def chapter_commands():
    return tutorial.commands(CHAPTER.read_text())


def tiers_of(command: str) -> list[str]:
    """The tiers after --tier, up to the comment or the next option."""
    words = command.partition(" #")[0].split()
    if "--tier" not in words:
        return []
    rest = words[words.index("--tier") + 1:]
    return rest[:next((i for i, w in enumerate(rest) if w.startswith("-")), len(rest))]


def test_every_command_is_one_the_runner_understands():
    cmds = chapter_commands()  # raises ValueError naming the line otherwise
    assert cmds[0].text == "torch-emu-kit new mydev --dir mydev"  # the vendor's command
    assert all(c.expected in (0, 1) for c in cmds)


def test_steps_are_the_integration_points_in_order():
    headings = re.findall(r"^## Step (\d+): (.+)$", CHAPTER.read_text(), flags=re.M)
    assert [int(n) for n, _ in headings] == list(range(len(STEPS) + 1))
    assert [title.lower() for _, title in headings[1:]] == [s.lower() for s in STEPS]


def scaffold_table() -> dict[str, bool]:
    """Step 0's table: tier -> whether the fresh scaffold passes it."""
    rows = re.findall(r"^\| ((?:`\w+`(?:, )?)+) \| (passes|fails|fail) \|", CHAPTER.read_text(), flags=re.M)
    return {tier: result == "passes" for tiers, result in rows for tier in re.findall(r"`(\w+)`", tiers)}


def test_every_step_names_existing_tiers_and_checks_them_on_both_backends():
    known = {t.name for t in discover([])}
    table = scaffold_table()
    assert set(table) <= known, f"the table names unknown tiers: {sorted(set(table) - known)}"
    by_section = {}
    for cmd in chapter_commands():
        by_section.setdefault(cmd.heading.partition(":")[0], []).append(cmd)
    assert [f"Step {n}" for n in range(len(STEPS) + 1)] == [s for s in by_section if s.startswith("Step")]
    step0 = [c for c in by_section["Step 0"] if c.text.startswith(SCAFFOLD) and tiers_of(c.text)]
    assert tiers_of(step0[0].text) == ["device", "memory", "generator", "operators"] and step0[0].expected == 0
    for section, cmds in by_section.items():
        if section == "Step 0":
            continue
        scaffold = [c for c in cmds if c.text.startswith(SCAFFOLD)]
        reference = [c for c in cmds if REFERENCE in c.text and tiers_of(c.text)]
        if not scaffold and section.startswith("Step"):
            raise AssertionError(f"{section} does not check its tier on the scaffold")
        for c in scaffold:
            tiers = tiers_of(c.text)
            assert tiers and set(tiers) <= set(table), f"{section}: {tiers} are not all in step 0's table"
            expected = 0 if all(table[t] for t in tiers) else 1
            assert c.expected == expected, f"{section}: the table says the scaffold exits {expected} on {tiers}"
            assert reference and all(tiers_of(r.text) == tiers and r.expected == 0 for r in reference), \
                f"{section} must run {tiers} on the reference, expecting 0"


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
    assert [c.expected for c in tutorial.commands(open(chapter).read())] == [0, 0, 0, 1, 3]
    assert main(["tutorial", chapter]) == 0
    assert main(["tutorial", chapter, "--from", "Later", "--workdir", str(tmp_path)]) == 1  # GREETING unset
    capfd.readouterr()


@pytest.mark.parametrize("body, status", [
    ("true   # exits 1\n", "exited 0, expected 1"),
    ("false\n", "exited 1, expected 0"),
])
def test_runner_stops_at_an_unexpected_status(tmp_path, capfd, body, status):
    chapter = write(tmp_path, f"```bash\n{body}touch should-not-exist\n```\n")
    assert main(["tutorial", chapter, "--workdir", str(tmp_path)]) == 1
    assert status in capfd.readouterr().err
    assert not (tmp_path / "should-not-exist").exists()


@pytest.mark.parametrize("line", [
    "make \\", "cat <<EOF", "for f in *; do", "if true; then", "exit 0", "false   # exits one",
    "false   # fails, exits 1",
])
def test_runner_rejects_lines_it_cannot_run_one_by_one(line):
    with pytest.raises(ValueError, match="line 2"):
        tutorial.commands(f"```bash\n{line}\n```\n")


@pytest.mark.parametrize("args, message", [
    (["/nonexistent/chapter.md"], "argument chapter: no such file: /nonexistent/chapter.md"),
    ([str(CHAPTER), "--workdir", "/nonexistent-dir"], "argument --workdir: no such folder: /nonexistent-dir"),
    ([str(CHAPTER), "--from", "No such heading"], "no command under a heading starting with 'No such heading'"),
])
def test_runner_refuses_a_bad_command_line_before_running(args, message, command_here):
    status, _, err = command_here("tutorial", *args, main=main)  # the kit's command line
    assert status == 2 and message in err


# LITERALINCLUDE START: KIT_TEST
@pytest.mark.kit
def test_whole_chapter_runs(tmp_path):
    """Generates and builds a backend with the scaffold, runs every command of the chapter, then reads the
    fresh scaffold's conformance report."""
    # `python` and `torch-emu-kit` in the chapter are this interpreter's, with torch-emu importable as it
    # is here (installed, or PYTHONPATH): nothing is added that the generated backend's own scripts would inherit.
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    r = subprocess.run([sys.executable, "-m", "torch_emu_kit", "tutorial", str(CHAPTER), "--workdir", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=3600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-20000:]
    report = json.loads((tmp_path / "mydev" / "conformance.json").read_text())
    assert report["device"] == "mydev"
    tiers = {t["tier"]: t for t in report["tiers"]}
    for name in ("device", "memory", "generator", "operators"):
        assert tiers[name]["ok"] and tiers[name]["skipped"] == 0, tiers[name]["first_failure"]
    for tier in tiers.values():  # the others fail or skip, each time saying why
        for check in tier["checks"]:
            assert check["status"] in ("passed", "failed", "skipped"), (tier["tier"], check)
            assert check["status"] == "passed" or check["reason"], (tier["tier"], check)
# LITERALINCLUDE END: KIT_TEST
