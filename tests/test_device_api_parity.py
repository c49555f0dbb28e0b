"""Semantics of the torch.cuda names torch.emu gained for parity: peer
access, default generators, runtime errors, external streams, device
monitoring (utilization, memory_usage, list_gpu_processes), the full device
properties, architectures. Compared with what torch.cuda documents."""

import ctypes
import os
import re
import subprocess
import time
import uuid

import pytest
import torch

import torch_emu
from conftest import run_python
from torch_emu.emu.parity import CannotApplyOnEmu

# The runtime's C API, as a library creating its own streams would call it.
runtime = ctypes.CDLL(torch_emu._C.__file__)
runtime.emuStreamCreateWithPriority.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
runtime.emuStreamDestroy.argtypes = [ctypes.c_void_p]


def create_raw_stream(device: int) -> int:
    handle = ctypes.c_void_p()
    with torch.emu.device(device):  # the runtime creates streams on the current device
        torch.emu.check_error(runtime.emuStreamCreateWithPriority(ctypes.byref(handle), 0))
    return handle.value


# ---- peer access ------------------------------------------------------------


def test_can_device_access_peer():
    assert torch.emu.can_device_access_peer(0, 1)
    assert torch.emu.can_device_access_peer(torch.device("emu:1"), "emu:0")
    assert not torch.emu.can_device_access_peer(1, 1)  # as cudaDeviceCanAccessPeer
    with torch.emu.device(1):
        assert torch.emu.can_device_access_peer(None, 0)


def test_can_device_access_peer_bad_devices():
    with pytest.raises(AssertionError, match=r"Invalid device id emu:7: there are 2 emu devices"):
        torch.emu.can_device_access_peer(7, 0)
    with pytest.raises(AssertionError, match="Invalid peer device id emu:-2"):
        torch.emu.can_device_access_peer(0, -2)
    with pytest.raises(ValueError, match="Expected an emu device"):
        torch.emu.can_device_access_peer("cpu", 0)


def test_peer_copy_between_devices_that_can_access_each_other(baseline_memory):
    x = torch.randn(64, device="emu:0")
    assert torch.equal(x.to("emu:1").cpu(), x.cpu())


# ---- default generators -------------------------------------------------------


def test_default_generators_are_the_devices_default_generators():
    gens = torch.emu.default_generators
    assert isinstance(gens, tuple) and len(gens) == torch.emu.device_count()
    assert [g.device for g in gens] == [torch.device("emu", i) for i in range(len(gens))]
    gens[1].manual_seed(1234)
    drawn = torch.randn(5, device="emu:1").cpu()
    torch.emu.manual_seed_all(1234)
    assert torch.equal(torch.randn(5, device="emu:1").cpu(), drawn)
    assert torch.equal(drawn, torch.randn(5, generator=torch.Generator().manual_seed(1234)))
    assert gens[1].initial_seed() == 1234


def test_default_generators_empty_until_initialised():
    out = run_python(
        """
        import torch
        assert torch.emu.default_generators == ()
        torch.emu.init()
        print(len(torch.emu.default_generators))
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2"


# ---- runtime errors -------------------------------------------------------------


def test_check_error_and_emu_error():
    assert torch.emu.check_error(torch.emu.emuStatus.SUCCESS) is None
    with pytest.raises(torch.emu.EmuError, match=r"^device not ready \(7\)$") as info:
        torch.emu.check_error(torch.emu.emuStatus.ERROR_NOT_READY)
    assert isinstance(info.value, RuntimeError) and info.value.code == 7
    with pytest.raises(torch.emu.EmuError, match=r"invalid device ordinal \(4\)"):
        torch.emu.check_error(4)
    with pytest.raises(torch.emu.EmuError, match=r"unrecognized error code \(999\)"):
        torch.emu.check_error(999)


def test_deferred_call_error_names_where_the_call_was_made():
    out = run_python(
        """
        import torch
        def seed_from_here():
            torch.emu._lazy_call("broken", lambda: torch.emu.set_rng_state(torch.zeros(3)))
        seed_from_here()
        try:
            torch.emu.init()
        except torch.emu.DeferredEmuCallError as e:
            print(type(e.__cause__).__name__)
            print(e)
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("TypeError\nemu call failed lazily at initialization with error: set_rng_state")
    assert "emu call was originally invoked at" in out.stdout and "seed_from_here" in out.stdout


# ---- external streams -------------------------------------------------------------


def test_external_stream_runs_work_on_the_runtime_stream(baseline_memory):
    handle = create_raw_stream(1)
    try:
        ext = torch.emu.ExternalStream(handle)
        assert isinstance(ext, torch.emu.Stream) and isinstance(ext, torch.Stream)
        assert ext.device == torch.device("emu:1") and ext.stream_id == handle
        assert ext.native_handle == handle
        a = torch.randn(32, 32)
        with torch.emu.stream(ext):
            assert torch.emu.current_stream(1) == ext
            x = a.to("emu:1", non_blocking=True)
            y = (x @ x).relu()
            done = torch.emu.Event()
            done.record(ext)
        torch.emu.current_stream(1).wait_event(done)
        ext.synchronize()
        assert ext.query()
        torch.testing.assert_close(y.cpu(), (a @ a).relu())
        assert ext.priority == 0
        del x, y
    finally:
        torch.emu.synchronize(1)
        runtime.emuStreamDestroy(handle)


def test_external_stream_over_a_pool_stream_and_get_stream_from_external(baseline_memory):
    s = torch.emu.Stream(0)
    same = torch.emu.get_stream_from_external(s.native_handle)
    assert type(same) is torch.emu.Stream and same.device == s.device and same.native_handle == s.native_handle
    ext = torch.emu.ExternalStream(s.native_handle, device="emu:0")
    with torch.emu.stream(ext):
        z = torch.ones(8, device="emu:0") * 3
    s.synchronize()  # the same runtime stream
    assert torch.equal(z.cpu(), torch.full((8,), 3.0))


def test_external_stream_bad_handles():
    handle = create_raw_stream(1)
    try:
        with pytest.raises(ValueError, match="belongs to emu:1, not emu:0"):
            torch.emu.ExternalStream(handle, device=0)
    finally:
        runtime.emuStreamDestroy(handle)
    with pytest.raises(RuntimeError, match="is not a live emu stream"):
        torch.emu.ExternalStream(handle)  # destroyed
    with pytest.raises(RuntimeError, match="is not a live emu stream"):
        torch.emu.ExternalStream(12345)  # never a stream: rejected without touching it
    with pytest.raises(RuntimeError, match="is not a live emu stream"):
        torch.emu.get_stream_from_external(0)
    with pytest.raises(TypeError, match="stream_ptr must be an int"):
        torch.emu.ExternalStream("0x1234")
    with pytest.raises(ValueError, match="Expected an emu device"):
        torch.emu.ExternalStream(handle, device="cpu")


def test_external_stream_destroyed_while_wrapped_fails_clearly():
    handle = create_raw_stream(0)
    ext = torch.emu.ExternalStream(handle)
    runtime.emuStreamDestroy(handle)
    with pytest.raises(RuntimeError, match="neither a pool stream nor a live external stream"):
        ext.query()


# ---- monitoring ------------------------------------------------------------------


def _idle_for_a_period():
    """Waits until the runtime's sampling period holds no activity."""
    time.sleep(torch_emu._C._utilization_period_ms() / 1000 + 0.1)


def test_utilization_and_memory_usage_measure_kernels(baseline_memory):
    _idle_for_a_period()
    assert (torch.emu.utilization(0), torch.emu.memory_usage(0)) == (0, 0)
    assert (torch.emu.utilization(1), torch.emu.memory_usage(1)) == (0, 0)
    x = torch.randn(256, 256, device="emu:0")
    end = time.monotonic() + 0.3  # keep the device busy for a while
    while time.monotonic() < end:
        x = torch.tanh(x @ x)
    torch.emu.synchronize(0)
    kernel, memory = torch.emu.utilization(0), torch.emu.memory_usage(0)
    assert 0 < kernel <= memory <= 100  # a kernel reads and writes device memory too
    assert torch.emu.utilization("emu:1") == 0  # per device
    with torch.emu.device(0):
        assert torch.emu.utilization() == torch.emu.utilization(0) or torch.emu.utilization() > 0
    del x


def test_memory_usage_counts_copies_without_kernels(baseline_memory):
    _idle_for_a_period()
    host = torch.randn(4 << 20).pin_memory()
    dev = torch.empty(4 << 20, device="emu:1")
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        dev.copy_(host)
        host.copy_(dev)
    torch.emu.synchronize(1)
    assert torch.emu.memory_usage(1) > 0
    assert torch.emu.utilization(1) == 0  # copies are not kernels
    del dev


def test_monitoring_bad_devices():
    with pytest.raises(torch.AcceleratorError, match="Invalid device emu:5"):
        torch.emu.utilization(5)
    with pytest.raises(ValueError, match="Expected an emu device"):
        torch.emu.memory_usage("cpu")
    with pytest.raises(TypeError, match="Invalid device"):
        torch.emu.list_gpu_processes(1.5)


def test_list_gpu_processes():
    out = run_python(
        """
        import os, torch
        torch.emu.init()
        print(torch.emu.list_gpu_processes(1))
        x = torch.empty(3 << 20, dtype=torch.uint8, device="emu:1")
        print(torch.emu.list_gpu_processes("emu:1"))
        free, total = torch.emu.mem_get_info(1)
        print(os.getpid(), (total - free) / 2**20)
        """
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["emu:1", "no processes are running"]
    pid, used_mb = lines[4].split()
    assert lines[2] == "emu:1"
    assert lines[3] == f"process {int(pid):>10d} uses {float(used_mb):>12.3f} MB emu memory"
    assert float(used_mb) >= 3


# ---- properties, architectures ------------------------------------------------------

# The fields of torch._C._CudaDeviceProperties (torch/_C/__init__.pyi of 2.13).
CUDA_PROPERTY_FIELDS = [
    "name", "major", "minor", "multi_processor_count", "total_memory", "is_integrated",
    "is_multi_gpu_board", "max_threads_per_multi_processor", "gcnArchName", "warp_size", "uuid",
    "L2_cache_size", "clock_rate", "memory_clock_rate", "memory_bus_width",
    "shared_memory_per_block", "shared_memory_per_multiprocessor",
]  # fmt: skip


def test_device_properties_have_every_cuda_field():
    props = torch.emu.get_device_properties("emu:1")
    for field in CUDA_PROPERTY_FIELDS:
        assert hasattr(props, field), field
    assert props.is_integrated == 1  # device memory is host memory
    assert props.is_multi_gpu_board == 0
    assert props.warp_size == 1 and props.max_threads_per_multi_processor == 1
    assert props.shared_memory_per_block == props.shared_memory_per_multiprocessor == 0
    assert props.memory_clock_rate == props.memory_bus_width == 0
    l2 = subprocess.run(["getconf", "LEVEL2_CACHE_SIZE"], capture_output=True, text=True).stdout.strip()
    assert props.L2_cache_size == max(int(l2 or 0), 0)
    cpufreq = "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"
    assert props.clock_rate == (int(open(cpufreq).read()) if os.path.exists(cpufreq) else 0)
    assert "uuid=" in repr(props)


def test_device_uuids_are_stable_and_distinct():
    ids = [torch.emu.get_device_properties(i).uuid for i in range(torch.emu.device_count())]
    assert len(set(ids)) == len(ids)
    assert ids == [torch.emu.get_device_properties(i).uuid for i in range(torch.emu.device_count())]
    for value in ids:
        assert str(uuid.UUID(value)) == value and uuid.UUID(value).variant == uuid.RFC_4122
    out = run_python("import torch; print(torch.emu.get_device_properties(0).uuid)")
    assert out.stdout.strip() == ids[0]  # another process sees the same device


def test_arch_list_and_gencode_flags():
    major, minor = torch.emu.get_device_capability()
    assert torch.emu.get_arch_list() == [f"emu_{major}{minor}"]
    with pytest.raises(CannotApplyOnEmu, match="no device code generation"):
        torch.emu.get_gencode_flags()
    out = run_python("import torch; print(torch.emu.get_arch_list(), torch.emu.is_initialized())")
    assert out.stdout.split()[-1] == "False"  # reading it does not start the device (fork stays safe)
    out = run_python("import torch; print(torch.emu.get_arch_list())", TORCH_EMU_DEVICE_COUNT="0")
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_dtype_support_flags():
    assert torch.emu.has_half is True
    assert torch.emu.has_magma is False
    assert torch.emu.is_tf32_supported() is False
    x = torch.randn(4, 4)
    torch.testing.assert_close((x.half().to("emu") @ x.half().to("emu")).cpu(), x.half() @ x.half())


def test_event_external_flag(baseline_memory):
    e = torch.emu.Event(enable_timing=True, external=True)
    start = torch.emu.Event(enable_timing=True)
    start.record()
    torch.ones(4, device="emu") + 1
    e.record()
    e.synchronize()
    assert e.query() and start.elapsed_time(e) >= 0


@pytest.mark.parametrize("name", ["temperature", "power_draw", "clock_rate"])
def test_sensor_readings_cannot_apply(name):
    with pytest.raises(CannotApplyOnEmu, match=re.escape("has no sensors of its own")):
        getattr(torch.emu, name)(0)
