"""The memory names of torch.cuda beyond the statistics, real on emu: the
per-process memory fraction, raw caching-allocator allocations, disabling the
cache, the pluggable allocator, pinned-memory statistics and the aliases."""

import gc
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from _after_import import run_after_import

pytestmark = pytest.mark.launch_mode

MiB = 1 << 20

ALLOCATOR_C = r"""
#include <stddef.h>
#include <stdlib.h>
/* The emu runtime's C API (csrc/runtime/emu_runtime.h), exported by torch_emu._C. */
int emuMalloc(void** ptr, size_t size);
int emuFree(void* ptr);

int allocs = 0, frees = 0;
size_t live_bytes = 0;

void* my_alloc(size_t size, int device, void* stream) {
  void* ptr = NULL;
  if (emuMalloc(&ptr, size) != 0) return NULL;
  allocs++;
  live_bytes += size;
  return ptr;
}

void my_free(void* ptr, size_t size, int device, void* stream) {
  emuFree(ptr);
  frees++;
  live_bytes -= size;
}

void* host_alloc(size_t size, int device, void* stream) { return malloc(size); }
void host_free(void* ptr, size_t size, int device, void* stream) { free(ptr); }
"""


@pytest.fixture(scope="module")
def allocator_so(tmp_path_factory):
    directory = tmp_path_factory.mktemp("alloc")
    (directory / "alloc.c").write_text(ALLOCATOR_C)
    so = directory / "liballoc.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(so), str(directory / "alloc.c")], check=True)
    return str(so)


def _fresh_cache():
    gc.collect()
    torch.emu.synchronize()
    torch.emu.empty_cache()


# --- set_per_process_memory_fraction ---------------------------------------------------------


def test_memory_fraction_caps_reserved_memory(baseline_memory):
    _fresh_cache()
    total = torch.emu.mem_get_info()[1]
    assert torch.emu.get_per_process_memory_fraction() == 1.0
    cap = torch.emu.memory_reserved() + 48 * MiB
    torch.emu.set_per_process_memory_fraction(cap / total)
    try:
        assert torch.emu.get_per_process_memory_fraction() == pytest.approx(cap / total)
        ooms = torch.emu.memory_stats()["num_ooms"]
        a = torch.ones(30 * MiB, dtype=torch.uint8, device="emu")  # fits
        with pytest.raises(torch.OutOfMemoryError, match=r"set_per_process_memory_fraction\(") as err:
            torch.empty(30 * MiB, dtype=torch.uint8, device="emu")
        assert "may reserve at most" in str(err.value)
        assert torch.emu.memory_stats()["num_ooms"] == ooms + 1
        assert torch.emu.memory_reserved() <= cap
        del a
        b = torch.ones(30 * MiB, dtype=torch.uint8, device="emu")  # the cached segment is reused
        assert b[-5:].tolist() == [1] * 5
        del b
        if torch.emu.device_count() > 1:  # the cap is per device
            c = torch.empty(80 * MiB, dtype=torch.uint8, device="emu:1")
            del c
    finally:
        torch.emu.set_per_process_memory_fraction(1.0)
    d = torch.empty(80 * MiB, dtype=torch.uint8, device="emu")
    del d
    _fresh_cache()


def test_memory_fraction_zero_and_bad_values(baseline_memory):
    _fresh_cache()
    torch.emu.set_per_process_memory_fraction(0.0)
    try:
        with pytest.raises(torch.emu.OutOfMemoryError, match="at most 0 bytes"):
            torch.empty(1, device="emu")
    finally:
        torch.emu.set_per_process_memory_fraction(1.0)
    with pytest.raises(ValueError, match="Allowed range: 0~1"):
        torch.emu.set_per_process_memory_fraction(1.5)
    with pytest.raises(ValueError, match="Allowed range: 0~1"):
        torch.emu.set_per_process_memory_fraction(-0.1)
    with pytest.raises(TypeError, match="must be `float`"):
        torch.emu.set_per_process_memory_fraction(1)
    with pytest.raises(ValueError, match="emu device"):
        torch.emu.set_per_process_memory_fraction(0.5, "cpu")
    with pytest.raises(RuntimeError, match="device"):
        torch.emu.set_per_process_memory_fraction(0.5, 99)
    assert torch.emu.get_per_process_memory_fraction() == 1.0


# --- caching_allocator_alloc / _delete / _enable -------------------------------------------------


def test_caching_allocator_alloc_and_delete(baseline_memory):
    before = torch.emu.memory_allocated()
    ptr = torch.emu.caching_allocator_alloc(10000)
    assert isinstance(ptr, int) and ptr != 0
    assert torch.emu.memory_allocated() - before == 10240  # rounded to 512 bytes, as on CUDA
    side = torch.emu.Stream()
    ptr2 = torch.emu.caching_allocator_alloc(4096, device="emu:0", stream=side)
    seg = next(s for s in torch.emu.memory_snapshot() for b in s["blocks"] if b["address"] == ptr2)
    main = next(s for s in torch.emu.memory_snapshot() for b in s["blocks"] if b["address"] == ptr)
    assert seg["stream"] != main["stream"]  # allocated for the side stream
    torch.emu.caching_allocator_delete(ptr)
    torch.emu.caching_allocator_delete(ptr2)
    assert torch.emu.memory_allocated() == before
    with pytest.raises(RuntimeError, match="invalid device pointer"):
        torch.emu.caching_allocator_delete(ptr)  # twice
    with pytest.raises(RuntimeError, match="invalid device pointer"):
        torch.emu.caching_allocator_delete(12345)
    with pytest.raises(ValueError, match=r"size must be a whole number from 0 to 2\*\*63-1, got -1"):
        torch.emu.caching_allocator_alloc(-1)
    with pytest.raises(RuntimeError, match="invalid emu stream id"):
        torch.emu.caching_allocator_alloc(16, stream=12345)
    with pytest.raises(TypeError, match="stream argument"):
        torch.emu.caching_allocator_alloc(16, stream="main")
    if torch.emu.device_count() > 1:
        with pytest.raises(ValueError, match="not on emu:0"):
            torch.emu.caching_allocator_alloc(16, device=0, stream=torch.emu.Stream("emu:1"))
    with pytest.raises(ValueError, match="emu device"):
        torch.emu.caching_allocator_alloc(16, device="cpu")


def test_raw_allocation_bad_numbers_name_the_argument(baseline_memory):
    before = torch.emu.memory_allocated()
    # As torch.cuda.caching_allocator_delete: an address the allocator does not own is a RuntimeError.
    for address in (-1, 2**64, 2**70):
        with pytest.raises(RuntimeError, match=f"invalid device pointer {address}: not allocated by torch.emu"):
            torch.emu.caching_allocator_delete(address)
    for address in (1.5, None, True):
        with pytest.raises(TypeError, match=f"mem_ptr must be an int .*, got {address}"):
            torch.emu.caching_allocator_delete(address)
    with pytest.raises(ValueError, match=r"size must be a whole number from 0 to 2\*\*63-1, got 1180591620717411"):
        torch.emu.caching_allocator_alloc(2**70)
    with pytest.raises(ValueError, match=r"size must be a whole number from 0 to 2\*\*63-1, got 16.0"):
        torch.emu.caching_allocator_alloc(16.0)
    with pytest.raises(ValueError, match=r"stream must be a whole number from -2\*\*63 to 2\*\*63-1, got 118059"):
        torch.emu.caching_allocator_alloc(16, stream=2**70)
    with pytest.raises(ValueError, match=r"mempool_id must be a pool id \(MemPool.id\), a pair of whole numbers"):
        torch.emu.memory_snapshot((-1, 1.5))
    assert torch.emu.memory_allocated() == before
    ptr = torch.emu.caching_allocator_alloc(512)  # the allocator works on
    torch.emu.caching_allocator_delete(ptr)
    torch.emu.caching_allocator_delete(0)  # a null pointer is nothing to free, as on CUDA
    assert torch.emu.memory_allocated() == before


def test_caching_allocator_enable(baseline_memory):
    _fresh_cache()
    reserved = torch.emu.memory_reserved()
    torch.emu.caching_allocator_enable(False)
    try:
        x = torch.randn(MiB, device="emu")
        assert torch.emu.memory_reserved() > reserved
        torch.testing.assert_close((x * 2).cpu(), x.cpu() * 2)
        del x
        gc.collect()
        assert torch.emu.memory_reserved() == reserved  # nothing cached
    finally:
        torch.emu.caching_allocator_enable(True)
    y = torch.randn(MiB, device="emu")
    del y
    assert torch.emu.memory_reserved() > reserved  # cached again
    _fresh_cache()
    with torch.emu.caching_allocator_disabled():
        z = torch.randn(MiB, device="emu")
        del z
        assert torch.emu.memory_reserved() == reserved
    w = torch.randn(MiB, device="emu")
    del w
    assert torch.emu.memory_reserved() > reserved
    _fresh_cache()


# --- pluggable allocator -----------------------------------------------------------------------


def test_change_current_allocator(allocator_so):
    result = run_after_import(f"""
        import ctypes, torch, torch_emu
        from torch_emu.emu.memory import EmuPluggableAllocator
        allocator = EmuPluggableAllocator({allocator_so!r}, "my_alloc", "my_free")
        torch.emu.memory.change_current_allocator(allocator)
        assert torch.emu.get_allocator_backend() == "pluggable"
        lib = ctypes.CDLL({allocator_so!r})
        count = lambda name: ctypes.c_int.in_dll(lib, name).value
        a = torch.randn(1000, 10)
        x = a.to("emu")
        y = torch.nn.functional.gelu(x @ x.T)
        torch.testing.assert_close(y.cpu(), torch.nn.functional.gelu(a @ a.T))
        assert count("allocs") >= 3, count("allocs")
        assert torch.emu.memory_allocated() == ctypes.c_size_t.in_dll(lib, "live_bytes").value > 0
        del x, y
        assert count("frees") == count("allocs"), (count("frees"), count("allocs"))
        assert torch.emu.memory_allocated() == 0
        try:
            torch.emu.memory.change_current_allocator(allocator)
        except RuntimeError as e:
            assert "already initialized" in str(e), e
        else:
            raise AssertionError("swapping twice must fail")
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_pluggable_allocator_must_return_device_memory(allocator_so):
    result = run_after_import(f"""
        import torch, torch_emu
        allocator = torch.emu.memory.EmuPluggableAllocator({allocator_so!r}, "host_alloc", "host_free")
        torch.emu.memory.change_current_allocator(allocator)
        try:
            torch.empty(10, device="emu")
        except RuntimeError as e:
            assert "not emu device memory" in str(e), e
            print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_pluggable_allocator_bad_inputs(allocator_so, tmp_path):
    with pytest.raises(AttributeError, match="no function 'nope'"):
        torch.emu.memory.EmuPluggableAllocator(allocator_so, "nope", "my_free")
    with pytest.raises(OSError):
        torch.emu.memory.EmuPluggableAllocator(str(tmp_path / "missing.so"), "my_alloc", "my_free")
    with pytest.raises(TypeError, match="EmuPluggableAllocator"):
        torch.emu.memory.change_current_allocator("my_alloc")
    torch.empty(1, device="emu")  # this process already allocated
    allocator = torch.emu.memory.EmuPluggableAllocator(allocator_so, "my_alloc", "my_free")
    with pytest.raises(RuntimeError, match="already initialized"):
        torch.emu.memory.change_current_allocator(allocator)
    assert torch.emu.get_allocator_backend() == "native"


def test_mem_pool_with_pluggable_allocator(baseline_memory, allocator_so):
    import ctypes

    lib = ctypes.CDLL(allocator_so)
    count = lambda name: ctypes.c_int.in_dll(lib, name).value  # noqa: E731
    allocs, frees = count("allocs"), count("frees")
    pool = torch.emu.MemPool(allocator=torch.emu.memory.EmuPluggableAllocator(allocator_so, "my_alloc", "my_free"))
    with torch.emu.use_mem_pool(pool):
        x = torch.arange(1000.0, device="emu")
    assert count("allocs") == allocs + 1  # one segment, from the user's allocator
    assert x.sum().item() == sum(range(1000))
    del x, pool
    gc.collect()
    assert count("frees") == frees + 1  # given back through the user's free


# --- pinned host memory statistics ---------------------------------------------------------------


def test_host_memory_stats():
    torch.emu.init()
    x = torch.randn(100000).pin_memory()
    nested = torch.emu.host_memory_stats_as_nested_dict()
    assert set(nested) >= {"allocations", "allocated_bytes", "active_requests", "active_bytes",
                           "num_host_alloc", "num_host_free", "host_alloc_time", "host_free_time"}
    flat = torch.emu.host_memory_stats()
    assert flat["active_requests.current"] >= 1
    assert flat["active_bytes.current"] >= x.numel() * 4
    assert flat["allocated_bytes.current"] == nested["allocated_bytes"]["current"]
    del x
    torch.emu.reset_peak_host_memory_stats()
    flat = torch.emu.host_memory_stats()
    assert flat["active_bytes.peak"] == flat["active_bytes.current"]
    torch.emu.reset_accumulated_host_memory_stats()
    assert torch.emu.host_memory_stats()["active_bytes.freed"] == 0


# --- aliases and small names ---------------------------------------------------------------------


def test_nested_stats_and_deprecated_aliases(baseline_memory):
    x = torch.empty(MiB, dtype=torch.uint8, device="emu")
    nested = torch.emu.memory_stats_as_nested_dict()
    flat = torch.emu.memory_stats()
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"]
    assert nested["num_ooms"] == flat["num_ooms"]
    assert torch.emu.memory_cached() == torch.emu.memory_reserved()
    assert torch.emu.max_memory_cached() == torch.emu.max_memory_reserved()
    del x
    with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
        torch.emu.reset_max_memory_allocated()
    assert torch.emu.max_memory_allocated() == torch.emu.memory_allocated()
    with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
        torch.emu.reset_max_memory_cached()
    assert torch.emu.max_memory_reserved() == torch.emu.memory_reserved()


def test_device_memory_and_names(baseline_memory):
    assert torch.emu.OutOfMemoryError is torch.OutOfMemoryError
    assert torch.emu.get_allocator_backend() == "native"
    free, total = torch.emu.mem_get_info()
    assert torch.emu.device_memory_used() == total - free
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="emu:0")
    assert torch.emu.device_memory_used(0) >= torch.emu.memory_reserved(0)
    assert "MB emu memory" in torch.emu.list_gpu_processes(0)
    assert "Allocated memory" in torch.emu.memory_summary()
    del x
    for name in ("caching_allocator_alloc", "caching_allocator_delete", "set_per_process_memory_fraction",
                 "MemPool", "use_mem_pool", "change_current_allocator", "memory_snapshot"):
        assert name in torch.emu.__all__
