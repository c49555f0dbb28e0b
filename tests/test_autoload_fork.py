"""Autoload through the torch.backends entry point, and the fork rule."""

import subprocess
import sys

from conftest import native_runtime_only, run_python
from _after_import import run_after_import


def test_import_torch_alone_loads_emu():
    r = run_python(
        """
        import torch
        x = torch.randn(4, device="emu")
        print(x.device, torch.emu.device_count(), torch.emu.is_initialized())
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["emu:0", "2", "True"]


def test_autoload_can_be_turned_off():
    r = run_python(
        """
        import torch
        print(hasattr(torch, "emu"))
        import torch_emu
        print(torch.ones(1, device="emu").device)
        """,
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "emu:0"]


def test_lazy_initialisation():
    r = run_after_import(
        """
        import torch
        torch.manual_seed(0)          # queued, does not start the device
        print(torch.emu.is_initialized())
        print(torch.randn(2, device="emu").cpu().equal(torch.randn(2, generator=torch.Generator().manual_seed(0))))
        print(torch.emu.is_initialized())
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True", "True"]


def test_device_count_and_memory_are_configurable():
    r = run_after_import(
        """
        import torch
        print(torch.emu.device_count(), torch.emu.get_device_properties(2).total_memory)
        try:
            torch.empty(300 << 20, dtype=torch.uint8, device="emu:2")
        except torch.OutOfMemoryError as e:
            print("OOM", "256.00 MiB" in str(e))
        """,
        TORCH_EMU_DEVICE_COUNT="3",
        TORCH_EMU_DEVICE_MEMORY="256MiB",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3", str(256 << 20), "OOM", "True"]


def test_bad_configuration_is_a_clear_error():
    r = run_after_import(
        """
        import torch
        print(torch.emu.is_available())
        try:
            torch.ones(1, device="emu")
        except RuntimeError as e:
            print("error:", e)
        """,
        TORCH_EMU_DEVICE_COUNT="many",
    )
    assert r.returncode == 0, r.stderr
    assert "False" in r.stdout and "TORCH_EMU_DEVICE_COUNT" in r.stdout


def test_forked_child_gets_a_clear_error():
    r = run_after_import(
        """
        import os, torch
        x = torch.ones(2, device="emu")
        pid = os.fork()
        if pid == 0:
            try:
                torch.ones(2, device="emu")
                os._exit(1)
            except RuntimeError as e:
                os._exit(0 if "spawn" in str(e) else 2)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), x.sum().item())
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "2.0"]


def test_a_forked_child_seeds_generators_its_parent_drew_from():
    # DataLoader workers seed in the child; the parent's queued draws are not
    # the child's to wait for (CUDA's generators seed there too).
    r = run_after_import(
        """
        import os, torch
        g = torch.Generator("emu").manual_seed(3)
        x = torch.rand(512, 512, device="emu", generator=g)  # queued in the default mode
        pid = os.fork()
        if pid == 0:
            torch.manual_seed(0)
            g.manual_seed(1)
            os._exit(0 if g.initial_seed() == 1 else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), g.initial_seed())
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "3"]


def test_fork_before_first_use_is_fine():
    r = run_after_import(
        """
        import os, torch
        # Asking about the devices does not start them (like CUDA's NVML path).
        assert torch.emu.is_available() and torch.emu.device_count() == 2
        pid = os.fork()
        if pid == 0:
            os._exit(0 if torch.ones(2, device="emu").sum().item() == 2 else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0"]


@native_runtime_only
def test_strict_mode_faults_on_host_access():
    r = run_after_import(
        """
        import ctypes, torch
        x = torch.ones(1024, device="emu")
        assert (x * 2).sum().item() == 2048      # kernels still work
        ctypes.c_float.from_address(x.data_ptr()).value  # host access: must crash
        print("not reached")
        """,
        TORCH_EMU_STRICT="1",
    )
    assert r.returncode != 0
    assert "not reached" not in r.stdout
    assert "strict mode" in r.stderr and "emu:0" in r.stderr


def test_importing_torch_emu_first_works():
    # torch_emu's own `import torch` autoloads torch_emu while it is half imported.
    r = run_python("import torch_emu, torch\nprint(torch.ones(2, device='emu').device)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["emu:0"]


def test_demo_command_line(command_here):
    r = subprocess.run(
        [sys.executable, "-m", "torch_emu", "demo", "--steps", "20"],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "(match)" in r.stdout and "ratio emu/CPU" in r.stdout
    status, _, err = command_here("demo", "--device", "emu:9")  # refused before it trains
    assert status != 0 and "emu:9" in err
