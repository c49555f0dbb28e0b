"""The upstream-suite runner (python -m torch_emu upstream) on small device-generic test files of
our own (tests/upstream_sample/): pairing each test's device result with its CPU result, a file
that does not import, a process that dies mid-file, the skip file, and bad command lines."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

SAMPLES = pathlib.Path(__file__).parent / "upstream_sample"


# The runner on the sample files, as `python -m torch_emu` takes it.
UPSTREAM = ("upstream", "--pytorch", str(SAMPLES))


def upstream(*args, cwd=None, cli="torch_emu", **env):
    """The runner, by `python -m torch_emu`, or with cli="torch_emu_kit" the kit's own command line."""
    return subprocess.run([sys.executable, "-m", cli, *UPSTREAM, *args],
                          capture_output=True, text=True, timeout=600, cwd=cwd, env={**os.environ, **env})


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("upstream")
    r = upstream("--file", "sample_device_generic.py", "--file", "sample_import_error.py", "--file", "sample_crash.py",
                 "--json", str(out / "report.json"), "--write-skip-file", str(out / "skips.json"),
                 "--bypass-device-restrictions")
    return r, {f["file"]: f for f in json.loads((out / "report.json").read_text())["files"]}, out / "skips.json"


# LITERALINCLUDE START: TEST_UPSTREAM_PAIRS
def test_each_test_is_paired_with_its_cpu_result(first_run):
    r, files, _ = first_run
    assert r.returncode == 1, r.stderr  # device failures where CPU passes
    sample = files["sample_device_generic.py"]
    # test_passes, test_dtypes_pass in two dtypes, and TestSampleLater's, whose emu class is named
    # TestSampleLaterEMU: every CPU result has its device result.
    assert sample["counts"]["both passed"] == 4 and "cpu only" not in sample["counts"]
    assert sorted(sample["device failed, cpu passed"]) == [
        "TestSample.test_fails_on_the_device_float32", "TestSample.test_fails_on_the_device_int64",
        "TestSample.test_subtest_fails_on_the_device"]
    assert "differs on the device" in sample["device failed, cpu passed"]["TestSample.test_fails_on_the_device_int64"]
    assert list(sample["both failed"]) == ["TestSample.test_fails_on_both"]
    # CPU skips it, the device fails it: a failure CPU cannot vouch for, listed and counted apart.
    assert sample["device failed, cpu skipped"] == {
        "TestSample.test_skipped_on_cpu_fails_on_the_device": "AssertionError: fails where CPU cannot tell"}
    assert sample["counts"]["device passed, cpu not"] == 1
    assert sample["device skipped"] == {"not today": 1, "Only runs on cpu": 1, "Only runs on cuda": 2}
    assert "TestSample.test_fails_on_the_device_float32: AssertionError" in r.stdout  # the list that matters
# LITERALINCLUDE END: TEST_UPSTREAM_PAIRS


def test_restricted_tests_run_apart_on_request(first_run):
    _, files, _ = first_run
    restricted = files["sample_device_generic.py"]["restricted"]
    assert restricted["passed"] == ["TestSample.test_cpu_only", "TestSample.test_restricted_passes"]
    assert list(restricted["failed"]) == ["TestSample.test_restricted_fails"]


def test_a_file_that_does_not_import_is_reported_not_counted(first_run):
    r, files, _ = first_run
    skew = files["sample_import_error.py"]
    assert "a_name_this_torch_does_not_have" in skew["import error"] and "counts" not in skew
    assert "not imported (version skew?)" in r.stdout and "1 file(s) not imported" in r.stdout


def test_a_crash_fails_its_test_and_the_file_goes_on(first_run):
    _, files, _ = first_run
    crash = files["sample_crash.py"]
    assert crash["device failed, cpu passed"] == {"TestCrash.test_b_crashes_on_the_device": "process killed by SIGABRT"}
    assert crash["counts"]["both passed"] == 2  # test_c ran in a new process


def test_the_written_skip_file_makes_the_run_pass(first_run):
    _, _, skips = first_run
    written = json.loads(skips.read_text())
    assert set(written["sample_device_generic.py"]["skipped_testcases"]) == {
        "TestSample.test_fails_on_the_device_float32", "TestSample.test_fails_on_the_device_int64",
        "TestSample.test_subtest_fails_on_the_device", "TestSample.test_skipped_on_cpu_fails_on_the_device"}
    r = upstream("--file", "sample_device_generic.py", "--file", "sample_crash.py", "--skip-file", str(skips))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASSED: 0 device test(s) fail where CPU passes or skips" in r.stdout


def test_skip_entries_by_name_without_dtypes_and_by_operator_in_the_kits_runner(tmp_path):
    # Run as in a vendor's environment: torch-emu-kit's command line, which imports nothing of
    # torch_emu (tests/test_kit_distribution.py), and the backend loaded by --import (autoload off),
    # as another vendor's would be.
    skips = tmp_path / "skips.json"
    skips.write_text(json.dumps({"sample_device_generic.py": {
        "skipped_testcases": {"TestSample.test_fails_on_the_device": "differs on purpose",
                              "TestSample.test_subtest_fails_on_the_device": "one subtest differs",
                              "TestSample.test_skipped_on_cpu_fails_on_the_device": "CPU cannot run it"},
        "op_skips": {}}}))
    r = upstream("--file", "sample_device_generic.py", "--import", "torch_emu", "--skip-file", str(skips),
                 "--json", str(tmp_path / "r.json"), cwd=tmp_path, cli="torch_emu_kit",
                 TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    report = json.loads((tmp_path / "r.json").read_text())["files"][0]
    assert r.returncode == 0 and report["counts"]["skip file"] == 4, r.stdout + r.stderr
    assert report["skip file"]["TestSample.test_fails_on_the_device_int64"] == "differs on purpose"
    assert report["counts"]["both passed"] == 4  # the backend named by --import ran them


def test_an_entry_without_dtypes_names_its_dtype_variants_only():
    from torch_emu_kit.conformance.upstream_worker import skip_reason

    options = {"skipped_testcases": {"TestLinalg.test_svd": "why"}}
    for key in ("TestLinalg.test_svd", "TestLinalg.test_svd_float32", "TestLinalg.test_svd_complex64_float8_e4m3fnuz"):
        assert skip_reason(key, "", "emu", options) == "why", key
    for key in ("TestLinalg.test_svd_lowrank_float32", "TestLinalg.test_svd_memory_allocation", "TestLinalg.test_svdx"):
        assert skip_reason(key, "", "emu", options) is None, key


@pytest.mark.parametrize("args, message", [
    (["--timeout", "-5"], "argument --timeout: must be a positive number, not '-5'"),
    (["--timeout", "0"], "argument --timeout: must be a positive number, not '0'"),
    (["--json", "/proc/nope/x.json"], "argument --json: cannot write /proc/nope/x.json: No such file or directory"),
    (["--write-skip-file", "/nonexistent-dir/s.json"],
     "argument --write-skip-file: cannot write /nonexistent-dir/s.json: No such file or directory"),
    (["--file", "no_such_test.py"], "not in"),
    (["--skip-file", "/nonexistent-skips.json"], "argument --skip-file: no such file: /nonexistent-skips.json"),
    (["--pytorch", "/nonexistent-pytorch"], "argument --pytorch: no such folder: /nonexistent-pytorch"),
])
def test_bad_command_lines_fail_before_running(args, message, command_here):
    status, out, err = command_here(*UPSTREAM, "--file", "sample_device_generic.py", *args)
    assert status == 2 and message in err, err
    assert "Traceback" not in err and "both pass" not in out  # nothing ran


@pytest.mark.parametrize("content, message", [
    ({"sample_device_generic.py": {"skipped": ["x"]}},
     "sample_device_generic.py: expected skipped_testcases and op_skips, each {name: reason}"),
    ({"sample_device_generic.py": ["x"]},
     "sample_device_generic.py: expected skipped_testcases and op_skips, each {name: reason}"),
    (["sample_device_generic.py"], "expected {test file: entry}"),
    ("{not json", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
])
def test_a_malformed_skip_file_is_refused(tmp_path, content, message, command_here):
    bad = tmp_path / "skips.json"
    bad.write_text(content if isinstance(content, str) else json.dumps(content))
    status, out, err = command_here(*UPSTREAM, "--file", "sample_device_generic.py", "--skip-file", str(bad))
    assert status == 2 and err == f"error: {bad}: {message}\n", err
    assert "both pass" not in out
