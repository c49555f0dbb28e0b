"""Installing torch-emu changes nothing for a program that does not use emu: ``import torch``
autoloads it, so every global setting of PyTorch that a program can read must be as without it.
And what emu changes for itself stays scoped to emu: backward of emu tensors runs on the
calling thread (torch_emu/backward_thread.py), every other backward as PyTorch decides."""

import json
import struct
import threading

import pytest
import torch

from conftest import run_python

SETTINGS = """
    import json, os, signal, sys, threading
    import torch
    print("torch_emu loaded:", "torch_emu" in sys.modules, file=sys.stderr)  # not a setting: apart
    settings = {
        # Before any backward: the autograd engine starts one thread per device of every
        # accelerator on its first backward, as it would for two GPUs.
        "python threads": threading.active_count(), "os threads": len(os.listdir("/proc/self/task")),
    }
    x = torch.ones(3, requires_grad=True)
    (x * 2).sum().backward()  # a CPU program's backward
    print(json.dumps({**settings,
        "autograd multithreading": torch.autograd.is_multithreading_enabled(),
        "intra-op threads": torch.get_num_threads(), "inter-op threads": torch.get_num_interop_threads(),
        "default dtype": str(torch.get_default_dtype()), "default device": str(torch.get_default_device()),
        "deterministic": torch.are_deterministic_algorithms_enabled(), "grad": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(), "anomaly": torch.is_anomaly_enabled(),
        "warn always": torch.is_warn_always_enabled(), "mkldnn": torch.backends.mkldnn.enabled,
        "matmul precision": torch.get_float32_matmul_precision(),
        "cpu autocast dtype": str(torch.get_autocast_dtype("cpu")),
        "signal handlers": {name: str(signal.getsignal(getattr(signal, name)))
                            for name in ("SIGSEGV", "SIGBUS", "SIGINT", "SIGTERM", "SIGCHLD", "SIGUSR1")},
        "environment": sorted(os.environ),
        "cpu result": float(torch.arange(4.0).sum()),
    }))
"""


def test_import_torch_changes_no_global_setting():
    without, with_emu = (run_python(SETTINGS, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload) for autoload in ("0", "1"))
    assert without.returncode == 0 and with_emu.returncode == 0, without.stderr + with_emu.stderr
    assert "torch_emu loaded: False" in without.stderr and "torch_emu loaded: True" in with_emu.stderr
    assert json.loads(with_emu.stdout) == json.loads(without.stdout)


# LITERALINCLUDE START: TEST_BACKWARD_THREAD
def _backward_thread(run) -> int:
    x = torch.randn(4, device="emu", requires_grad=True)
    seen = []
    x.register_hook(lambda grad: seen.append(threading.get_ident()))
    run((x * 2).sum(), x)
    return seen[0]


@pytest.mark.parametrize("run", [lambda y, x: y.backward(), lambda y, x: torch.autograd.grad(y, x)],
                         ids=["backward", "autograd.grad"])
def test_backward_of_emu_tensors_runs_on_the_calling_thread(run, baseline_memory):
    assert torch.autograd.is_multithreading_enabled()
    assert _backward_thread(run) == threading.get_ident()
    assert torch.autograd.is_multithreading_enabled()  # only for that backward


def test_without_it_the_engine_would_use_its_device_thread(baseline_memory):
    engine = torch.autograd.graph._engine_run_backward.__wrapped__  # PyTorch's own

    def run(y, x):
        engine((y,), (torch.ones_like(y),), False, False, (), allow_unreachable=True, accumulate_grad=True)

    assert _backward_thread(run) != threading.get_ident()


def test_a_users_own_setting_is_kept(baseline_memory):
    with torch.autograd.set_multithreading_enabled(False):
        assert _backward_thread(lambda y, x: y.backward()) == threading.get_ident()
        assert not torch.autograd.is_multithreading_enabled()
    assert torch.autograd.is_multithreading_enabled()
# LITERALINCLUDE END: TEST_BACKWARD_THREAD


def tls_bytes(path: str) -> int:
    """The size of a 64-bit ELF library's thread-local block (its PT_TLS segment), 0 if none."""
    with open(path, "rb") as f:
        header = f.read(64)
        assert header[:4] == b"\x7fELF" and header[4] == 2, f"{path} is not a 64-bit ELF file"
        phoff, = struct.unpack_from("<Q", header, 32)
        phentsize, phnum = struct.unpack_from("<HH", header, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)  # the program headers, not the whole library
    for i in range(phnum):
        p_type, = struct.unpack_from("<I", table, i * phentsize)
        if p_type == 7:  # PT_TLS
            return struct.unpack_from("<Q", table, i * phentsize + 40)[0]
    return 0


def test_the_extension_takes_little_of_the_static_tls_reserve():
    # The extension's thread-locals live in the static TLS block that glibc keeps for libraries
    # loaded later (EMU_HOT_TLS, csrc/runtime/emu_runtime_tls.h): a few hundred bytes for every
    # such library of the process. A thread-local buffer there would make loading the extension,
    # or a library loaded after it, fail with "cannot allocate memory in static TLS block".
    import torch_emu._C

    assert 0 < tls_bytes(torch_emu._C.__file__) <= 512
