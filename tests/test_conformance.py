"""`python -m torch_emu conformance`: tiers pass on emu, failures, crashes and hangs are reported, not fatal."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def conformance(*args, env=None, timeout=240, cli="torch_emu"):
    """`python -m torch_emu conformance`, or with cli="torch_emu_kit" the kit's own command line."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", cli, "conformance", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=ROOT)


def test_fast_tiers_pass_on_emu(tmp_path):
    report = tmp_path / "report.json"
    r = conformance("--tier", "device", "memory", "generator", "--jobs", "2", "--json", str(report))
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(report.read_text())
    assert data["ok"] and data["device"] == "emu"
    assert [t["tier"] for t in data["tiers"]] == ["device", "memory", "generator"]  # in order, run two at a time
    for tier in data["tiers"]:
        assert tier["failed"] == 0 and tier["passed"] >= 5 and tier["chapter"]
        assert all(c["status"] in ("passed", "skipped") and c["meaning"] for c in tier["checks"])
    assert "PASSED: 3/3 tiers" in r.stdout


def test_operators_without_native_kernels(tmp_path):
    report = tmp_path / "report.json"
    r = conformance("--tier", "operators", "parity", "--json", str(report), env={"TORCH_EMU_NATIVE_KERNELS": "0"})
    assert r.returncode == 0, r.stdout + r.stderr
    tiers = json.loads(report.read_text())["tiers"]
    assert tiers[0]["passed"] >= 8 and tiers[1]["passed"] == 3 and "OpInfos" in tiers[1]["checks"][0]["note"]


def test_distributed_without_a_backend_fails_at_once(tmp_path):
    """A device with no c10d backend fails every distributed check with the reason; no rank is spawned to hang."""
    report = tmp_path / "report.json"
    r = conformance("--tier", "distributed", "--device", "meta", "--timeout", "60", "--json", str(report))
    assert r.returncode == 1, r.stdout + r.stderr
    checks = json.loads(report.read_text())["tiers"][0]["checks"]
    assert [c["status"] for c in checks] == ["failed"] * 4 and all(c["seconds"] < 5 for c in checks)
    assert all("no torch.distributed backend is registered for device 'meta'" in c["reason"] for c in checks)


BROKEN = '''
    """A vendor tier whose checks fail in every way a backend can."""
    import os
    import time
    import unittest

    import _shared  # a helper module next to this file: importable while the tier loads

    TIER = "broken"
    CHAPTER = "conformance"


    def check_passes(dev):
        """Passes, with its folder's helper."""
        assert _shared.ANSWER == 42


    def check_skips(dev):
        """Skips."""
        raise unittest.SkipTest("not for this device")


    def check_fails(dev):
        """Fails with a message."""
        assert 1 + 1 == 3, "arithmetic is off"


    def check_aborts(dev):
        """Kills its process."""
        os.abort()


    def check_after_abort(dev):
        """Never runs: its process is gone."""
'''
HANGS = '''
    """A vendor tier that hangs."""
    import time

    TIER = "hangs"
    CHAPTER = "conformance"


    def check_hangs(dev):
        """Sleeps past the timeout."""
        time.sleep(120)
'''


def test_failures_crashes_and_hangs_are_reported(tmp_path):
    (tmp_path / "broken.py").write_text(textwrap.dedent(BROKEN))
    (tmp_path / "hangs.py").write_text(textwrap.dedent(HANGS))
    (tmp_path / "_shared.py").write_text("ANSWER = 42\n")
    report = tmp_path / "report.json"
    r = conformance("--checks-module", str(tmp_path / "broken.py"), "--checks-module", str(tmp_path / "hangs.py"),
                    "--tier", "broken", "hangs", "--timeout", "8", "--json", str(report))
    assert r.returncode == 1, r.stdout + r.stderr
    tiers = {t["tier"]: t for t in json.loads(report.read_text())["tiers"]}
    checks = {c["check"]: c for c in tiers["broken"]["checks"]}
    assert checks["check_passes"]["status"] == "passed"
    assert checks["check_skips"]["status"] == "skipped" and checks["check_skips"]["reason"] == "not for this device"
    assert checks["check_fails"]["status"] == "failed"
    assert checks["check_fails"]["reason"].startswith("AssertionError: arithmetic is off")
    assert checks["check_aborts"] == {**checks["check_aborts"], "status": "failed",
                                      "reason": "process killed by SIGABRT"}
    assert checks["check_after_abort"]["status"] == "not run"
    assert (tiers["broken"]["passed"], tiers["broken"]["failed"], tiers["broken"]["skipped"]) == (1, 2, 1)
    assert tiers["broken"]["first_failure"] == "check_fails: " + checks["check_fails"]["reason"]
    assert tiers["hangs"]["checks"][0]["reason"] == "timed out after 8 s" and not tiers["hangs"]["ok"]
    assert "arithmetic is off" in r.stdout and "timed out after 8 s" in r.stdout and "FAILED: 0/2 tiers" in r.stdout


@pytest.mark.launch_mode
def test_list_and_bad_tier(tmp_path, command_here):
    status, out, _ = command_here("conformance", "--list")
    assert status == 0 and "operators:" in out and "docs/guide/streams_events.md" in out
    assert "  check_out_of_memory: " in out
    status, _, err = command_here("conformance", "--tier", "nonexistent")
    assert status == 2 and "unknown tier(s) nonexistent" in err
    (tmp_path / "dup.py").write_text('TIER = "device"\n')
    status, _, err = command_here("conformance", "--checks-module", str(tmp_path / "dup.py"), "--list")
    assert status == 2 and "defined twice" in err


@pytest.mark.parametrize("args, message", [
    (["--timeout", "-5"], "argument --timeout: must be a positive number, not '-5'"),
    (["--jobs", "0"], "argument --jobs: must be a positive integer, not '0'"),
    (["--timeout", "nan"], "argument --timeout: must be a positive number, not 'nan'"),
    (["--json", "/proc/nope/x.json"], "argument --json: cannot write /proc/nope/x.json: No such file or directory"),
    (["--json", "/tmp"], "argument --json: cannot write /tmp: Is a directory"),
    (["--checks-module", "/nonexistent/tier.py"], "argument --checks-module: no such file: /nonexistent/tier.py"),
])
def test_bad_command_lines_fail_before_running(args, message, command_here):
    status, out, err = command_here("conformance", *args)
    assert status == 2 and message in err, err
    assert "Traceback" not in err and out == ""  # refused by the parser: no tier ran


NO_CHECKS = {
    "tests_only.py": '"""Checks named like pytest tests."""\nTIER = "tests_only"\n\n\ndef test_x(dev):\n    pass\n',
    "bare.py": 'TIER = "bare"\n',
}


@pytest.mark.parametrize("module", NO_CHECKS)
def test_a_tier_without_checks_is_refused(tmp_path, module, command_here):
    """It would pass having checked nothing (and link to docs/guide/.md without a CHAPTER)."""
    (tmp_path / module).write_text(NO_CHECKS[module])
    for extra in ([], ["--list"]):
        status, out, err = command_here("conformance", "--checks-module", str(tmp_path / module), *extra)
        assert status == 2, out + err
        tier = module.removesuffix(".py")
        assert err == f"error: {tmp_path / module}: tier '{tier}' has no checks (functions named check_*)\n"
        assert out == ""


def test_a_checks_module_that_does_not_load_is_refused(tmp_path, command_here):
    (tmp_path / "bad.py").write_text("import no_such_module_here\n")
    status, _, err = command_here("conformance", "--checks-module", str(tmp_path / "bad.py"), "--list")
    assert status == 2 and "Traceback" not in err
    assert err == f"error: {tmp_path / 'bad.py'} does not load: ModuleNotFoundError: " \
                  "No module named 'no_such_module_here'\n"


def test_a_tier_without_chapter_lists_no_guide(tmp_path, command_here):
    (tmp_path / "nochapter.py").write_text('"""No chapter."""\nTIER = "nochapter"\n\n\ndef check_x(dev):\n    pass\n')
    status, out, _ = command_here("conformance", "--checks-module", str(tmp_path / "nochapter.py"), "--list")
    assert status == 0 and "\nnochapter: No chapter.\n" in out, out
    assert "docs/guide/.md" not in out


@pytest.mark.parametrize("args, message", [
    (["conformance", "--timeout", "0"], "argument --timeout: must be a positive number, not '0'"),
    (["upstream", "--pytorch", ".", "--timeout", "-1"], "argument --timeout: must be a positive number, not '-1'"),
    (["demo", "--steps", "0"], "argument --steps: must be a positive integer, not '0'"),
    (["demo", "--steps", "2.5"], "argument --steps: must be a positive integer, not '2.5'"),
])
def test_every_timeout_and_count_must_be_positive(args, message, command_here):
    status, _, err = command_here(*args)
    assert status == 2 and message in err


def test_guide_table_matches_the_tiers():
    from torch_emu_kit.conformance.runner import discover

    text = (ROOT / "docs/guide/conformance.md").read_text()
    tiers = text.split("\n## Tiers\n", 1)[1].split("\n## ", 1)[0]  # the section's table only
    rows = [line for line in tiers.splitlines() if line.startswith("| `")]
    expected = [f"| `{t.name}` | {t.meaning} | {{doc}}`{t.chapter}` |" for t in discover([])]
    assert rows == expected


def test_backend_not_autoloaded_needs_import(tmp_path):
    """The tiers' processes load no backend of their own: without autoload, --import names it. Run
    by the kit's command line, which imports nothing of torch_emu (tests/test_kit_distribution.py),
    as in a vendor's environment."""
    env = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    r = conformance("--tier", "device", env=env, cli="torch_emu_kit")
    assert r.returncode == 1 and "no PrivateUse1 backend is loaded" in r.stdout
    r = conformance("--tier", "device", "--import", "torch_emu", env=env, cli="torch_emu_kit")
    assert r.returncode == 0, r.stdout + r.stderr
