"""Semantics of the torch.cuda names torch.emu gained for parity: peer
access, default generators, runtime errors, external streams, device
monitoring (utilization, memory_usage, list_gpu_processes), the full device
properties, architectures. Compared with what torch.cuda documents."""

import ctypes
import json
import os
import re
import subprocess
import time
import uuid

import pytest
import torch

import torch_emu
from conftest import native_runtime_only
from _after_import import run_after_import
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


@pytest.fixture(scope="module")
def fresh_process() -> dict:
    """What a fresh process sees before and after emu starts (one interpreter
    for several tests: starting one costs seconds)."""
    out = run_after_import(
        """
        import json, os, torch
        facts = {"arch_list": torch.emu.get_arch_list(), "generators_before": len(torch.emu.default_generators)}
        facts["initialized_by_arch_list"] = torch.emu.is_initialized()
        torch.emu.init()
        facts["generators_after"] = len(torch.emu.default_generators)
        facts["processes_idle"] = torch.emu.list_gpu_processes(1)
        x = torch.empty(3 << 20, dtype=torch.uint8, device="emu:1")
        facts["processes_used"] = torch.emu.list_gpu_processes("emu:1")
        free, total = torch.emu.mem_get_info(1)
        facts["pid"], facts["used_mb"] = os.getpid(), (total - free) / 2**20
        facts["uuid0"] = torch.emu.get_device_properties(0).uuid
        print(json.dumps(facts))
        """
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


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
    torch.emu.init()  # filled when emu starts, as torch.cuda's (run alone, nothing started it yet)
    gens = torch.emu.default_generators
    assert isinstance(gens, tuple) and len(gens) == torch.emu.device_count()
    assert [g.device for g in gens] == [torch.device("emu", i) for i in range(len(gens))]
    gens[1].manual_seed(1234)
    drawn = torch.randn(5, device="emu:1").cpu()
    torch.emu.manual_seed_all(1234)
    assert torch.equal(torch.randn(5, device="emu:1").cpu(), drawn)
    assert torch.equal(drawn, torch.randn(5, generator=torch.Generator().manual_seed(1234)))
    assert gens[1].initial_seed() == 1234


def test_default_generators_empty_until_initialised(fresh_process):
    assert fresh_process["generators_before"] == 0
    assert fresh_process["generators_after"] == torch.emu.device_count()


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
    out = run_after_import(
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


@pytest.mark.launch_mode
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


@pytest.mark.launch_mode
def test_external_stream_over_a_pool_stream_and_get_stream_from_external(baseline_memory):
    s = torch.emu.Stream(0)
    same = torch.emu.get_stream_from_external(s.native_handle)
    assert type(same) is torch.emu.Stream and same.device == s.device and same.native_handle == s.native_handle
    ext = torch.emu.ExternalStream(s.native_handle, device="emu:0")
    with torch.emu.stream(ext):
        z = torch.ones(8, device="emu:0") * 3
    s.synchronize()  # the same runtime stream
    assert torch.equal(z.cpu(), torch.full((8,), 3.0))


@pytest.mark.launch_mode
def test_a_generator_seeds_after_the_external_stream_it_drew_on_is_gone(baseline_memory):
    # Its owner destroyed it, which waited for its work: nothing left to wait for.
    handle = create_raw_stream(1)
    g = torch.Generator("emu:1").manual_seed(2)
    with torch.emu.stream(torch.emu.ExternalStream(handle)):
        x = torch.randn(300, 300, device="emu:1", generator=g)
    runtime.emuStreamDestroy(handle)
    g.manual_seed(3)
    assert torch.equal(torch.randn(5, device="emu:1", generator=g).cpu(),
                       torch.randn(5, generator=torch.Generator().manual_seed(3)))
    assert torch.equal(x.cpu(), torch.randn(300, 300, generator=torch.Generator().manual_seed(2)))


@pytest.mark.launch_mode
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


@pytest.mark.launch_mode
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


@pytest.mark.launch_mode
@native_runtime_only
def test_utilization_and_memory_usage_measure_kernels(baseline_memory):
    _idle_for_a_period()
    assert (torch.emu.utilization(0), torch.emu.memory_usage(0)) == (0, 0)
    assert (torch.emu.utilization(1), torch.emu.memory_usage(1)) == (0, 0)
    x = torch.randn(256, 256, device="emu:0")
    end = time.monotonic() + 0.3  # keep the device busy for a while
    while time.monotonic() < end:
        x = torch.tanh(x @ x)
        # Waited for each time: queued unchecked, 0.3 s of launches took 80 s to run on a busy machine.
        torch.emu.synchronize(0)
    kernel, memory = torch.emu.utilization(0), torch.emu.memory_usage(0)
    assert 0 < kernel <= memory <= 100  # a kernel reads and writes device memory too
    assert torch.emu.utilization("emu:1") == 0  # per device
    with torch.emu.device(0):
        assert torch.emu.utilization() > 0  # default: the current device
    with torch.emu.device(1):
        assert torch.emu.utilization() == 0
    del x


@pytest.mark.launch_mode
@native_runtime_only
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


def test_list_gpu_processes(fresh_process):
    assert fresh_process["processes_idle"] == "emu:1\nno processes are running"
    pid, used_mb = fresh_process["pid"], fresh_process["used_mb"]
    assert fresh_process["processes_used"] == f"emu:1\nprocess {pid:>10d} uses {used_mb:>12.3f} MB emu memory"
    assert used_mb >= 3


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


def test_device_uuids_are_stable_and_distinct(fresh_process):
    ids = [torch.emu.get_device_properties(i).uuid for i in range(torch.emu.device_count())]
    assert len(set(ids)) == len(ids)
    assert ids == [torch.emu.get_device_properties(i).uuid for i in range(torch.emu.device_count())]
    for value in ids:
        assert str(uuid.UUID(value)) == value and uuid.UUID(value).variant == uuid.RFC_4122
    assert fresh_process["uuid0"] == ids[0]  # another process sees the same device


def test_arch_list_and_gencode_flags(fresh_process):
    major, minor = torch.emu.get_device_capability()
    assert torch.emu.get_arch_list() == [f"emu_{major}{minor}"]
    with pytest.raises(CannotApplyOnEmu, match="no device code generation"):
        torch.emu.get_gencode_flags()
    assert fresh_process["arch_list"] == torch.emu.get_arch_list()
    assert not fresh_process["initialized_by_arch_list"]  # reading it does not start emu (fork stays safe)
    out = run_after_import("import torch; print(torch.emu.get_arch_list())", TORCH_EMU_DEVICE_COUNT="0")
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_dtype_support_flags():
    assert torch.emu.has_half is True
    assert torch.emu.has_magma is False
    assert torch.emu.is_tf32_supported() is False
    x = torch.randn(4, 4)
    torch.testing.assert_close((x.half().to("emu") @ x.half().to("emu")).cpu(), x.half() @ x.half())


@pytest.mark.launch_mode
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


# ---- torch.emu.comm --------------------------------------------------------------


def test_comm_broadcast(baseline_memory):
    src = torch.randn(3, 4)
    outs = torch.emu.comm.broadcast(src, devices=[0, "emu:1"])
    assert [o.device.index for o in outs] == [0, 1]
    for o in outs:
        assert torch.equal(o.cpu(), src)
    on_emu0 = outs[0]
    assert torch.emu.comm.broadcast(on_emu0, [0, 1])[0] is on_emu0  # its own device: the tensor itself
    dst = [torch.empty(3, 4, device="emu:1"), torch.empty(3, 4, device="emu:0")]
    assert torch.emu.comm.broadcast(on_emu0, out=dst) == tuple(dst)
    assert torch.equal(dst[0].cpu(), src) and torch.equal(dst[1].cpu(), src)
    with pytest.raises(RuntimeError, match="Exactly one of 'devices' and 'out'"):
        torch.emu.comm.broadcast(src)
    with pytest.raises(RuntimeError, match="output tensor 0 is on cpu"):
        torch.emu.comm.broadcast(src, out=[torch.empty(3, 4)])
    with pytest.raises(RuntimeError, match=r"output tensor 0 has shape \(4,\)"):
        torch.emu.comm.broadcast(src, out=[torch.empty(4, device="emu:0")])
    with pytest.raises(torch.AcceleratorError, match="Invalid device emu:3"):
        torch.emu.comm.broadcast(src, devices=[3])
    del outs, on_emu0, dst


@pytest.mark.parametrize("buffer_size", [64, 10485760])
def test_comm_broadcast_coalesced(baseline_memory, buffer_size):
    tensors = [torch.randn(5, device="emu:0"), torch.arange(7, device="emu:0"), torch.randn(2, 3, device="emu:0")]
    per_device = torch.emu.comm.broadcast_coalesced(tensors, [0, 1], buffer_size=buffer_size)
    assert all(a is b for a, b in zip(per_device[0], tensors))
    for copy, original in zip(per_device[1], tensors):
        assert copy.device == torch.device("emu:1") and copy.dtype == original.dtype
        assert torch.equal(copy.cpu(), original.cpu())
    with pytest.raises(RuntimeError, match="all tensors on one device"):
        torch.emu.comm.broadcast_coalesced([tensors[0], torch.zeros(1)], [1])
    del per_device, tensors, copy, original


def test_comm_reduce_add(baseline_memory):
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    total = torch.emu.comm.reduce_add([a.to("emu:0"), b.to("emu:1")], destination=1)
    assert total.device == torch.device("emu:1")
    torch.testing.assert_close(total.cpu(), a + b)
    x = a.to("emu:0")
    assert torch.emu.comm.reduce_add([x], 0) is x
    with pytest.raises(RuntimeError, match="input tensor 1 is on cpu"):
        torch.emu.comm.reduce_add([x, b])
    with pytest.raises(ValueError, match="input 1 has invalid size: got 2x2, but expected 4x4"):
        torch.emu.comm.reduce_add([x, torch.zeros(2, 2, device="emu:1")])
    with pytest.raises(RuntimeError, match="destination to be on the same emu device"):
        torch.emu.comm.reduce_add([x, x], destination=1)
    del total, x


def test_comm_reduce_add_coalesced(baseline_memory):
    cpu = [[torch.randn(3), torch.randn(2, 2).double()], [torch.randn(3), torch.randn(2, 2).double()]]
    emu = [[t.to(f"emu:{d}") for t in ts] for d, ts in enumerate(cpu)]
    sums = torch.emu.comm.reduce_add_coalesced(emu, destination=0, buffer_size=16)
    assert [s.device for s in sums] == [torch.device("emu:0")] * 2
    for s, a, b in zip(sums, *cpu):
        torch.testing.assert_close(s.cpu(), a + b)
    del emu, sums, s


@pytest.mark.launch_mode
@pytest.mark.parametrize("dim", [0, 1])
def test_comm_scatter_and_gather(baseline_memory, dim):
    src = torch.randn(6, 6)
    parts = torch.emu.comm.scatter(src, devices=[0, 1], dim=dim)
    assert [p.device.index for p in parts] == [0, 1]
    assert [p.shape[dim] for p in parts] == [3, 3]
    torch.testing.assert_close(torch.emu.comm.gather(parts, dim=dim, destination="cpu"), src)
    uneven = torch.emu.comm.scatter(src, [1, 0], chunk_sizes=[1, 5], dim=dim, streams=[torch.emu.Stream(1), None])
    assert [p.shape[dim] for p in uneven] == [1, 5]
    torch.emu.synchronize(1)
    gathered = torch.emu.comm.gather(uneven, dim=dim, destination=1)
    assert gathered.device == torch.device("emu:1")
    torch.testing.assert_close(gathered.cpu(), src)
    with torch.emu.device(1):
        assert torch.emu.comm.gather(uneven, dim).device == torch.device("emu:1")  # default: current device
    out = [torch.empty_like(p) for p in parts]
    assert all(a is b for a, b in zip(torch.emu.comm.scatter(src, dim=dim, out=out), out))
    into = torch.empty(6, 6, device="emu:0")
    assert torch.emu.comm.gather(out, dim, out=into) is into
    torch.testing.assert_close(into.cpu(), src)
    with pytest.warns(FutureWarning, match="-1 to represent CPU"):
        assert torch.emu.comm.gather(parts, dim, destination=-1).device.type == "cpu"
    del parts, uneven, gathered, out, into


@pytest.mark.launch_mode
def test_comm_scatter_gather_bad_inputs():
    src = torch.randn(4, 2)
    with pytest.raises(RuntimeError, match=r"chunk_sizes \[1, 2\] must have one size per device \(2\) summing to"):
        torch.emu.comm.scatter(src, [0, 1], chunk_sizes=[1, 2])
    with pytest.raises(RuntimeError, match="must not be specified when 'out'"):
        torch.emu.comm.scatter(src, [0], out=[torch.empty(4, 2, device="emu:0")])
    with pytest.raises(RuntimeError, match="one stream per device"):
        torch.emu.comm.scatter(src, [0, 1], streams=[None])
    with pytest.raises(RuntimeError, match="input tensor 0 is on cpu"):
        torch.emu.comm.gather([src])
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        torch.emu.comm.gather([torch.zeros(2, 3, device="emu:0"), torch.zeros(2, 2, device="emu:1")], dim=0)
