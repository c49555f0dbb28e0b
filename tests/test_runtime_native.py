"""Runs the native test programs of the emu runtime (csrc/runtime, plain C++17, no torch): the
programs in tests/native, linked against the runtime's release library, the one torch_emu._C links
(scripts/build_runtime.py: built once, incrementally, by ninja)."""

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import build_runtime  # noqa: E402

TIMEOUT = 120
PROGRAMS = ("test_runtime", "strict_fault", "test_runtime_stats", "test_faults", "test_plugin", "test_graphs")

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None,
                                reason="no C++ compiler is installed")


# LITERALINCLUDE START: NATIVE_BUILD
def native_programs(*programs):
    """The release runtime library brought up to date (ninja: a source changed since the last build
    is recompiled, nothing else) and the native test `programs` linked against it; returns the
    build directory (libemu_runtime.a, obj/, bin/<program>)."""
    return build_runtime.build("release", programs, quiet=True)
# LITERALINCLUDE END: NATIVE_BUILD


@pytest.fixture(scope="module")
def build_dir():
    return native_programs(*PROGRAMS)


@pytest.fixture(scope="module")
def test_runtime(build_dir):
    return build_dir / "bin" / "test_runtime"


@pytest.fixture(scope="module")
def strict_fault(build_dir):
    return build_dir / "bin" / "strict_fault"


@pytest.fixture(scope="module")
def test_runtime_stats(build_dir):
    return build_dir / "bin" / "test_runtime_stats"


@pytest.fixture(scope="module")
def test_faults(build_dir):
    return build_dir / "bin" / "test_faults"


@pytest.fixture(scope="module")
def test_plugin(build_dir):
    return build_dir / "bin" / "test_plugin"


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
INLINE_ONLY_HEADERS = {"env", "tls"}


def test_runtime_headers_and_sources_are_named_alike():
    runtime = ROOT / "csrc" / "runtime"
    topics = {p.stem.removeprefix("emu_runtime_") for p in runtime.glob("emu_runtime_*.h")}
    sources = {p.stem for p in runtime.glob("*.cpp")}
    assert topics - INLINE_ONLY_HEADERS - sources == set(), "topic headers without their X.cpp"
    assert INLINE_ONLY_HEADERS & sources == set()
    assert sources - topics == CORE_API_SOURCES, "sources that follow neither half of the rule"
    private = {p.name for p in runtime.glob("*.h") if not p.name.startswith("emu_runtime")}
    assert all(name.endswith("_internal.h") for name in private), private


def test_runtime_compiles_without_warnings(build_dir):
    """Every runtime source is in the library and compiled without a warning under -Wall -Wextra:
    the compiler's output of each object is kept beside it (obj/<name>.o.log), so this holds also
    when nothing needed compiling."""
    sources = build_runtime.sources()
    assert len(sources) > 10
    members = subprocess.run(["ar", "t", str(build_dir / build_runtime.LIBRARY)], capture_output=True, text=True,
                             check=True).stdout.split()
    assert sorted(members) == sorted(f"{p.stem}.o" for p in sources)
    warnings = {p.name: (build_dir / "obj" / f"{p.stem}.o.log").read_text() for p in sources}
    assert {name: text for name, text in warnings.items() if text} == {}


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
