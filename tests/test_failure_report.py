"""A failing test says how to run it again as it ran (tests/conftest.py): the launch mode, the
runtime, its seed and the TORCH_EMU_* variables, and the command; its random inputs come
from its own seed, not from the tests that ran before it; and it is reported once, without
leak errors of its own or of the next test."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

CONFTEST = pathlib.Path(__file__).parent / "conftest.py"


@pytest.mark.launch_mode  # reports it
def test_a_failure_prints_how_to_reproduce_it(tmp_path):
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(
        "import torch\n"
        "def test_uses_random_numbers_first():\n    torch.rand(100)\n"
        "def test_fails(baseline_memory):\n    kept = torch.ones(64, 64, device='emu')\n"
        "    print('drawn', torch.rand(1, device='emu').item())\n    assert False\n"
        "def test_after(baseline_memory):\n    assert torch.ones(4, device='emu').sum().item() == 4\n"
    )
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TORCH_EMU_")}, "TORCH_EMU_LAUNCH_QUEUED": "0"}
    runs = [subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-c", os.devnull,
                            "--rootdir", str(tmp_path), *tests], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
            for tests in (["test_sample.py"], ["test_sample.py::test_fails"])]
    for run in runs:
        assert run.returncode == 1, run.stdout + run.stderr
        assert "how to reproduce" in run.stdout
        assert "launch mode: auto, runtime: native, seed: " in run.stdout
        assert "environment: TORCH_EMU_LAUNCH_QUEUED=0" in run.stdout
        assert "again: TORCH_EMU_LAUNCH_QUEUED=0 TORCH_EMU_TEST_WORKERS=0 bash scripts/test.sh test_sample.py::test_fails" in run.stdout
    # One failure, not three: the failed test's traceback holds `kept`, which is
    # neither its leak nor, once freed during the next test, that test's.
    assert "1 failed, 2 passed" in runs[0].stdout and "leaked" not in runs[0].stdout, runs[0].stdout
    drawn = [next(line for line in run.stdout.splitlines() if line.startswith("drawn")) for run in runs]
    assert drawn[0] == drawn[1]  # the same number alone as after another test
