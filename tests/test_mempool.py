"""Private memory pools: torch.emu.MemPool and use_mem_pool, with
torch.cuda's semantics (routing, isolation, use counts, release)."""

import gc
import threading

import pytest
import torch

pytestmark = pytest.mark.launch_mode

MiB = 1 << 20


def _pool_segments(pool):
    return [(s["address"], s["address"] + s["total_size"]) for s in pool.snapshot()]


def _inside(ptr, ranges):
    return any(lo <= ptr < hi for lo, hi in ranges)


def test_pool_id_and_use_count(baseline_memory):
    a, b = torch.emu.MemPool(), torch.emu.MemPool()
    assert isinstance(a.id, tuple) and len(a.id) == 2 and all(isinstance(i, int) for i in a.id)
    assert a.id != b.id and a.id != (0, 0)
    assert a.allocator is None
    assert a.use_count() == 1
    with torch.emu.use_mem_pool(a):
        assert a.use_count() == 2
        assert b.use_count() == 1
    assert a.use_count() == 1


def test_allocations_are_routed_to_the_pool(baseline_memory):
    pool = torch.emu.MemPool()
    outside = torch.randn(1000, device="emu")
    with torch.emu.use_mem_pool(pool):
        x = torch.randn(1000, device="emu")
        y = torch.erf(x)  # the output of a fallback kernel, allocated inside the kernel
        z = x @ x.new_ones(1000, 3)
    segments = _pool_segments(pool)
    assert segments
    for t in (x, y, z):
        assert _inside(t.data_ptr(), segments)
    assert not _inside(outside.data_ptr(), segments)
    assert {tuple(s["segment_pool_id"]) for s in pool.snapshot()} == {pool.id}
    # Results are those of CPU.
    torch.testing.assert_close(y.cpu(), torch.erf(x.cpu()))
    torch.testing.assert_close(z.cpu(), x.cpu() @ torch.ones(1000, 3))
    after = torch.randn(1000, device="emu")  # outside the block: default pool again
    assert not _inside(after.data_ptr(), segments)


def test_pool_memory_is_reused_inside_and_isolated_outside(baseline_memory):
    pool = torch.emu.MemPool()
    with torch.emu.use_mem_pool(pool):
        x = torch.empty(MiB, dtype=torch.uint8, device="emu")
    address = x.data_ptr()
    del x
    outside = torch.empty(MiB, dtype=torch.uint8, device="emu")
    assert not _inside(outside.data_ptr(), _pool_segments(pool))
    with torch.emu.use_mem_pool(pool):
        again = torch.empty(MiB, dtype=torch.uint8, device="emu")
    assert again.data_ptr() == address


def test_empty_cache_keeps_live_pools_and_releases_dead_ones(baseline_memory):
    torch.emu.empty_cache()
    reserved = torch.emu.memory_reserved()
    pool = torch.emu.MemPool()
    with torch.emu.use_mem_pool(pool):
        x = torch.empty(12 * MiB, dtype=torch.uint8, device="emu")
    del x
    torch.emu.empty_cache()  # the pool is alive: its cached segment stays
    assert torch.emu.memory_reserved() - reserved == 12 * MiB
    assert len(pool.snapshot()) == 1
    del pool
    gc.collect()
    assert torch.emu.memory_reserved() == reserved  # its unused segments went with it


def test_pool_dying_with_a_live_tensor(baseline_memory):
    torch.emu.empty_cache()
    reserved = torch.emu.memory_reserved()
    pool = torch.emu.MemPool()
    with torch.emu.use_mem_pool(pool):
        x = torch.arange(10, dtype=torch.float32, device="emu")
    del pool
    gc.collect()
    assert x.sum().item() == 45  # memory still valid
    assert torch.emu.memory_reserved() > reserved
    del x
    torch.emu.empty_cache()
    assert torch.emu.memory_reserved() == reserved


def test_only_the_current_thread_is_routed(baseline_memory):
    pool = torch.emu.MemPool()
    ready, done = threading.Event(), threading.Event()
    other = {}

    def worker():
        ready.wait()
        other["t"] = torch.empty(4096, device="emu")
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    with torch.emu.use_mem_pool(pool):
        mine = torch.empty(4096, device="emu")
        ready.set()
        done.wait(30)
    thread.join(30)
    segments = _pool_segments(pool)
    assert _inside(mine.data_ptr(), segments)
    assert not _inside(other["t"].data_ptr(), segments)


def test_pool_on_another_device(baseline_memory):
    if torch.emu.device_count() < 2:
        pytest.skip("needs two emu devices")
    pool = torch.emu.MemPool()
    with torch.emu.use_mem_pool(pool, device="emu:1"):
        on1 = torch.empty(4096, device="emu:1")
        on0 = torch.empty(4096, device="emu:0")  # device 0 is not routed
    segments = pool.snapshot()
    assert {s["device"] for s in segments} == {1}
    ranges = [(s["address"], s["address"] + s["total_size"]) for s in segments]
    assert _inside(on1.data_ptr(), ranges) and not _inside(on0.data_ptr(), ranges)


def test_nested_pools_route_to_the_innermost(baseline_memory):
    outer, inner = torch.emu.MemPool(), torch.emu.MemPool()
    with torch.emu.use_mem_pool(outer):
        a = torch.empty(100, device="emu")
        with torch.emu.use_mem_pool(inner):
            b = torch.empty(100, device="emu")
        c = torch.empty(100, device="emu")
    assert _inside(a.data_ptr(), _pool_segments(outer)) and _inside(c.data_ptr(), _pool_segments(outer))
    assert _inside(b.data_ptr(), _pool_segments(inner))


def test_no_split_gives_each_allocation_its_own_segment(baseline_memory):
    pool = torch.emu.MemPool(no_split=True)
    with torch.emu.use_mem_pool(pool):
        a = torch.empty(1000, dtype=torch.uint8, device="emu")
        b = torch.empty(1000, dtype=torch.uint8, device="emu")
    segments = pool.snapshot()
    assert len(segments) == 2
    assert all(len(s["blocks"]) == 1 for s in segments)
    del a, b


def test_use_on_oom_pool_lends_its_cached_blocks(baseline_memory):
    torch.emu.empty_cache()
    pool = torch.emu.MemPool(use_on_oom=True)
    with torch.emu.use_mem_pool(pool):
        x = torch.empty(20 * MiB, dtype=torch.uint8, device="emu")
    address = x.data_ptr()
    del x
    total = torch.emu.mem_get_info()[1]
    torch.emu.set_per_process_memory_fraction((torch.emu.memory_reserved() + MiB) / total)
    try:
        y = torch.empty(20 * MiB, dtype=torch.uint8, device="emu")  # no room: borrowed
        assert y.data_ptr() == address
        del y
        plain = torch.emu.MemPool()
        with pytest.raises(torch.OutOfMemoryError, match="set_per_process_memory_fraction"):
            with torch.emu.use_mem_pool(plain):
                torch.empty(20 * MiB, dtype=torch.uint8, device="emu")
    finally:
        torch.emu.set_per_process_memory_fraction(1.0)


def test_graph_pool_handles_are_fresh():
    import torch_emu

    ids = {tuple(torch_emu._C._graph_pool_handle()) for _ in range(3)}
    assert len(ids) == 3 and all(first == 0 and second > 0 for first, second in ids)


def test_bad_inputs(baseline_memory):
    pool = torch.emu.MemPool()
    with pytest.raises(TypeError, match="MemPool"):
        with torch.emu.use_mem_pool("pool"):
            pass
    with pytest.raises(ValueError, match="emu device"):
        with torch.emu.use_mem_pool(pool, device="cpu"):
            pass
    with pytest.raises(TypeError, match="EmuPluggableAllocator"):
        torch.emu.MemPool(allocator=3)
    with pytest.raises(RuntimeError, match="invalid device index|out of range|device"):
        with torch.emu.use_mem_pool(pool, device=99):
            pass
    assert pool.use_count() == 1
    with torch.emu.use_mem_pool(pool):
        # The same pool twice at once on one device is a programming error, as on CUDA.
        with pytest.raises(RuntimeError, match="already allocating"):
            with torch.emu.use_mem_pool(pool):
                pass
    assert pool.use_count() == 1
