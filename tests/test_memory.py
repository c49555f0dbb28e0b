"""The caching device allocator, its statistics and out-of-memory behaviour,
and the pinned host allocator."""

import gc

import pytest
import torch

pytestmark = pytest.mark.launch_mode

MiB = 1 << 20


def _stats(device=0):
    gc.collect()
    torch.emu.synchronize(device)
    return torch.emu.memory_stats(device)


def test_allocation_updates_stats_and_returns_to_baseline(baseline_memory):
    base = _stats()
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="emu")
    s = _stats()
    assert s["allocated_bytes.all.current"] - base["allocated_bytes.all.current"] == 3 * MiB
    assert s["requested_bytes.all.current"] - base["requested_bytes.all.current"] == 3 * MiB
    assert s["active_bytes.all.current"] >= s["allocated_bytes.all.current"]
    assert s["reserved_bytes.all.current"] >= s["allocated_bytes.all.current"]
    assert s["allocation.all.allocated"] == base["allocation.all.allocated"] + 1
    assert torch.emu.memory_allocated() == s["allocated_bytes.all.current"]
    assert torch.emu.max_memory_allocated() >= 3 * MiB
    del x
    s = _stats()
    assert s["allocated_bytes.all.current"] == base["allocated_bytes.all.current"]
    assert s["allocation.all.freed"] == base["allocation.all.freed"] + 1


def test_cache_reuses_blocks_without_new_segments(baseline_memory):
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="emu")
    del x
    segments = _stats()["segment.all.allocated"]
    reserved = torch.emu.memory_reserved()
    for _ in range(20):
        y = torch.empty(4 * MiB, dtype=torch.uint8, device="emu")
        del y
    assert _stats()["segment.all.allocated"] == segments
    assert torch.emu.memory_reserved() == reserved


def test_small_blocks_split_one_segment(baseline_memory):
    torch.emu.empty_cache()
    before = _stats()["segment.small_pool.allocated"]
    xs = [torch.empty(1024, dtype=torch.uint8, device="emu") for _ in range(64)]
    s = _stats()
    assert s["segment.small_pool.allocated"] - before <= 1  # all from one 2 MiB segment
    assert s["active.small_pool.current"] >= 64
    del xs


# LITERALINCLUDE START: TEST_PARKED_BLOCKS
def test_a_freed_block_serves_the_next_allocation_of_its_size_on_its_stream(baseline_memory):
    """park_block (EmuDeviceAllocator.cpp): a freed block is kept as it is for
    the next allocation of the same rounded size on the same stream."""
    first, second = torch.emu.Stream(), torch.emu.Stream()  # segments of their own
    with torch.emu.stream(first):
        x = torch.empty(1024, dtype=torch.uint8, device="emu")
        keep = torch.empty(1024, dtype=torch.uint8, device="emu")
        where = x.data_ptr()
        del x
        y = torch.empty(1000, dtype=torch.uint8, device="emu")  # rounded up to 1024
        assert y.data_ptr() == where
        del y
    with torch.emu.stream(second):  # never another stream's block, parked or not
        z = torch.empty(1024, dtype=torch.uint8, device="emu")
        assert z.data_ptr() != where
    del z, keep


def test_parked_blocks_are_merged_for_whoever_reads_the_pools(baseline_memory):
    """The statistics, the segments and empty_cache see freed blocks merged
    with their free neighbours, as if no block had been parked."""
    base = _stats()

    def grew(name):
        return _stats()[name] - base[name]

    with torch.emu.stream(torch.emu.Stream()):  # a segment of its own
        xs = [torch.empty(1024, dtype=torch.uint8, device="emu") for _ in range(8)]
        assert grew("inactive_split.small_pool.current") == 1  # the segment's rest
        del xs[0]  # freed while its neighbour is in use: a cached split block of its own
        assert grew("inactive_split.small_pool.current") == 2
        assert grew("inactive_split_bytes.small_pool.current") == 2 * MiB - 7 * 1024
        assert grew("active_bytes.small_pool.current") == 7 * 1024
        del xs  # more frees than parking slots: all merge into one whole segment
        assert grew("inactive_split.small_pool.current") == 0
        assert grew("active.small_pool.current") == 0
        assert grew("reserved_bytes.small_pool.current") == 2 * MiB
        y = torch.empty(1024, dtype=torch.uint8, device="emu")
        del y  # parked, and still released by empty_cache
    torch.emu.empty_cache()
    assert grew("reserved_bytes.all.current") <= 0
    assert grew("segment.small_pool.current") <= 0
# LITERALINCLUDE END: TEST_PARKED_BLOCKS


def test_empty_cache_releases_reserved_memory(baseline_memory):
    x = torch.empty(64 * MiB, dtype=torch.uint8, device="emu")
    free_with = torch.emu.mem_get_info()[0]
    del x
    assert torch.emu.memory_reserved() >= 64 * MiB
    torch.emu.empty_cache()
    assert torch.emu.memory_reserved() < 64 * MiB
    assert torch.emu.mem_get_info()[0] >= free_with + 64 * MiB


def test_peak_and_reset(baseline_memory):
    torch.emu.reset_peak_memory_stats()
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="emu")
    del x
    assert torch.emu.max_memory_allocated() >= 8 * MiB
    torch.emu.reset_peak_memory_stats()
    assert torch.emu.max_memory_allocated() == torch.emu.memory_allocated()
    torch.emu.reset_accumulated_memory_stats()
    assert _stats()["allocation.all.allocated"] == 0


def test_devices_have_separate_stats(baseline_memory):
    base1 = torch.emu.memory_allocated(1)
    x = torch.empty(MiB, dtype=torch.uint8, device="emu:1")
    assert torch.emu.memory_allocated(1) - base1 == MiB
    assert torch.emu.memory_allocated("emu:1") == torch.emu.memory_allocated(torch.device("emu:1"))
    del x


def test_out_of_memory_is_clean(baseline_memory):
    total = torch.emu.mem_get_info()[1]
    base = _stats()
    with pytest.raises(torch.OutOfMemoryError, match=r"emu out of memory. Tried to allocate"):
        torch.empty(total + MiB, dtype=torch.uint8, device="emu")
    s = _stats()
    assert s["num_ooms"] == base["num_ooms"] + 1
    assert s["allocated_bytes.all.current"] == base["allocated_bytes.all.current"]
    # The device still works after an OOM.
    assert torch.ones(4, device="emu").sum().item() == 4


def test_oom_frees_cache_and_retries(baseline_memory):
    free, total = torch.emu.mem_get_info()
    chunk = free // 3
    blocks = [torch.empty(chunk, dtype=torch.uint8, device="emu") for _ in range(2)]
    del blocks  # now cached, not free at the device
    base = _stats()
    big = torch.empty(2 * chunk + chunk // 2, dtype=torch.uint8, device="emu")  # needs the cache back
    assert _stats()["num_alloc_retries"] == base["num_alloc_retries"] + 1
    del big
    torch.emu.empty_cache()


@pytest.mark.parametrize("device", [9, -1, 200, 2**70])
def test_device_out_of_range_is_named(device, baseline_memory):
    # Also past c10::DeviceIndex and int64: the same error, not a binding's type dump.
    for call in (torch.emu.memory_stats, torch.emu.memory_allocated, torch.emu.mem_get_info,
                 torch.emu.reset_peak_memory_stats, torch.emu.get_per_process_memory_fraction):
        with pytest.raises(torch.AcceleratorError, match=f"Invalid device emu:{device}: there are"):
            call(device)
    assert torch.ones(2, device="emu").sum().item() == 2


def test_memory_summary_mentions_numbers():
    x = torch.empty(MiB, dtype=torch.uint8, device="emu")
    text = torch.emu.memory_summary()
    assert "Allocated memory" in text and "device ID 0" in text and "Out-of-memory errors" in text
    del x


def test_accelerator_memory_api_matches():
    x = torch.empty(MiB, dtype=torch.uint8, device="emu")
    assert torch.accelerator.memory.memory_allocated(0) == torch.emu.memory_allocated(0)
    assert torch.accelerator.memory.get_memory_info(0) == torch.emu.mem_get_info(0)
    del x


def test_pinned_memory():
    x = torch.arange(1000.0)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and torch.equal(p, x)
    d = p.to("emu", non_blocking=True)
    torch.emu.synchronize()
    assert torch.equal(d.cpu(), x)
    assert torch.empty(10, pin_memory=True).is_pinned()


def test_stats_reach_baseline_after_model_work(baseline_memory):
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).emu()
    out = model(torch.randn(16, 32, device="emu")).sum()
    out.backward()
    del model, out
