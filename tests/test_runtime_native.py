"""Builds the emu runtime (csrc/runtime, plain C++17, no torch) with the native
test programs in tests/native and runs them."""

import os
import re
import shutil
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_SOURCES = sorted(str(p) for p in (ROOT / "csrc" / "runtime").glob("*.cpp"))
NATIVE = ROOT / "tests" / "native"
TIMEOUT = 120

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


def _compile(output, *sources, flags=("-O1",)):
    cmd = ["g++", "-std=c++17", *flags, "-pthread", "-I", str(ROOT / "csrc"), *sources, "-o", str(output)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{' '.join(map(str, cmd))}\n{result.stderr}"
    return output


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("emu_runtime")


@pytest.fixture(scope="module")
def runtime_objects(build_dir):
    """The runtime compiled once, as the extension compiles it (-O2, position independent), with
    warnings as errors, one compiler per core; every native test program links these objects."""
    flags = ("-O2", "-fPIC", "-Wall", "-Wextra", "-Werror")
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        return list(pool.map(lambda source: _compile(build_dir / (Path(source).stem + ".o"), "-c", source,
                                                     flags=flags), RUNTIME_SOURCES))


@pytest.fixture(scope="module")
def test_runtime(build_dir, runtime_objects):
    return _compile(build_dir / "test_runtime", *runtime_objects, str(NATIVE / "test_runtime.cpp"))


@pytest.fixture(scope="module")
def strict_fault(build_dir, runtime_objects):
    return _compile(build_dir / "strict_fault", *runtime_objects, str(NATIVE / "strict_fault.cpp"))


@pytest.fixture(scope="module")
def test_runtime_stats(build_dir, runtime_objects):
    return _compile(build_dir / "test_runtime_stats", *runtime_objects, str(NATIVE / "test_runtime_stats.cpp"))


@pytest.fixture(scope="module")
def test_faults(build_dir, runtime_objects):
    return _compile(build_dir / "test_faults", *runtime_objects, str(NATIVE / "test_faults.cpp"))


@pytest.fixture(scope="module")
def test_plugin(build_dir, runtime_objects):
    return _compile(build_dir / "test_plugin", *runtime_objects, str(NATIVE / "test_plugin.cpp"))


def _env(**overrides):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_EMU_")}
    env.update(overrides)
    return env


def _run(cmd, env=None):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=TIMEOUT,
                          env=env if env is not None else _env())


# The naming rule of csrc/runtime (written at the top of emu_runtime.h): a topic header
# emu_runtime_X.h is implemented by X.cpp; emu_runtime.h by runtime.cpp and one file per concern it
# declares; every other header is private (*_internal.h).
CORE_API_SOURCES = {"runtime", "memory", "streams", "events", "copies", "launches"}
INLINE_ONLY_HEADERS = {"env"}


def test_runtime_headers_and_sources_are_named_alike():
    runtime = ROOT / "csrc" / "runtime"
    topics = {p.stem.removeprefix("emu_runtime_") for p in runtime.glob("emu_runtime_*.h")}
    sources = {p.stem for p in runtime.glob("*.cpp")}
    assert topics - INLINE_ONLY_HEADERS - sources == set(), "topic headers without their X.cpp"
    assert INLINE_ONLY_HEADERS & sources == set()
    assert sources - topics == CORE_API_SOURCES, "sources that follow neither half of the rule"
    private = {p.name for p in runtime.glob("*.h") if not p.name.startswith("emu_runtime")}
    assert all(name.endswith("_internal.h") for name in private), private


def test_runtime_compiles_without_warnings(runtime_objects):
    assert len(runtime_objects) == len(RUNTIME_SOURCES)


def test_runtime_native(test_runtime):
    result = _run([test_runtime])
    assert result.returncode == 0, f"exit code {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "all runtime checks passed" in result.stdout


def test_runtime_stats_native(test_runtime_stats):
    result = _run([test_runtime_stats])
    assert result.returncode == 0, f"exit code {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "all runtime stats checks passed" in result.stdout


@pytest.mark.launch_mode
def test_faults_and_performance_model_native(test_faults):
    result = _run([test_faults], env=_env(TORCH_EMU_PROFILE="h2d=1GB/s,launch=2ms"))
    assert result.returncode == 0, f"exit code {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "all fault and model checks passed" in result.stdout


@pytest.mark.parametrize("mode", ["", "late"])
def test_another_runtime_plugs_in_native(test_plugin, mode):
    result = _run([test_plugin, mode] if mode else [test_plugin])
    assert result.returncode == 0, f"exit code {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "all plugin checks passed" in result.stdout


@pytest.mark.launch_mode
def test_exit_with_live_streams_does_not_hang(test_runtime):
    result = _run([test_runtime, "exit"])
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert result.stdout.strip() == "exiting"


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, {"count": "2", "capacity": str(8 << 30), "strict": "0"}),
        ({"TORCH_EMU_DEVICE_COUNT": "4", "TORCH_EMU_DEVICE_MEMORY": "512MiB"},
         {"count": "4", "capacity": str(512 << 20), "strict": "0"}),
        ({"TORCH_EMU_DEVICE_MEMORY": "8G", "TORCH_EMU_STRICT": "1"},
         {"count": "2", "capacity": str(8 << 30), "strict": "1"}),
        ({"TORCH_EMU_DEVICE_MEMORY": "3kb"}, {"count": "2", "capacity": "4096", "strict": "0"}),
    ],
)
def test_config_from_environment(test_runtime, env, expected):
    result = _run([test_runtime, "info"], env=_env(**env))
    assert result.returncode == 0, result.stderr
    info = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert info == expected


@pytest.mark.parametrize(
    "env, message",
    [
        ({"TORCH_EMU_DEVICE_COUNT": "abc"},
         "TORCH_EMU_DEVICE_COUNT='abc' is not a device count between 1 and 16"),
        ({"TORCH_EMU_DEVICE_COUNT": "17"}, "TORCH_EMU_DEVICE_COUNT='17'"),
        ({"TORCH_EMU_DEVICE_MEMORY": "lots"}, "TORCH_EMU_DEVICE_MEMORY='lots'"),
        ({"TORCH_EMU_STRICT": "maybe"}, "TORCH_EMU_STRICT='maybe'"),
    ],
)
def test_bad_config_is_an_initialization_error(test_runtime, env, message):
    result = _run([test_runtime, "info"], env=_env(**env))
    assert result.returncode == 0, result.stderr
    assert "error=emuErrorInitializationError" in result.stdout
    assert message in result.stdout


@pytest.mark.parametrize("device", [0, 1])
def test_strict_mode_host_access_faults(strict_fault, device):
    result = _run([strict_fault, "host", device])
    assert result.returncode == -signal.SIGSEGV, (result.returncode, result.stdout, result.stderr)
    address = result.stdout.strip()
    assert re.fullmatch(r"0x[0-9a-f]+", address), result.stdout
    assert (f"torch-emu strict mode: host access to device memory at {address} (emu:{device}) "
            "outside a kernel") in result.stderr


def test_strict_mode_kernel_access_works(strict_fault):
    result = _run([strict_fault, "kernel"])
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert result.stdout.strip() == "ok"


def test_strict_mode_leaves_other_faults_alone(strict_fault):
    result = _run([strict_fault, "other"])
    assert result.returncode == -signal.SIGSEGV, (result.returncode, result.stdout, result.stderr)
    assert "torch-emu strict mode" not in result.stderr
