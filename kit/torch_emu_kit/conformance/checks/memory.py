"""The caching allocator's statistics are exact, peaks reset, the cache empties, and OOM is an exception."""

import gc

import torch

TIER = "memory"
CHAPTER = "memory"
ORDER = 20
MB = 1 << 20


def settle():
    gc.collect()
    torch.accelerator.synchronize()


def check_allocated_tracks_tensors(dev):
    """memory_allocated grows by at least a tensor's size and returns to where it was when the tensor dies."""
    settle()
    before = torch.accelerator.memory_allocated()
    x = torch.empty(4 * MB, dtype=torch.uint8, device=dev)
    assert torch.accelerator.memory_allocated() >= before + 4 * MB
    del x
    settle()
    assert torch.accelerator.memory_allocated() == before


def check_reserved_and_empty_cache(dev):
    """Freed blocks stay reserved for reuse; empty_cache gives unused ones back."""
    settle()
    x = torch.empty(8 * MB, dtype=torch.uint8, device=dev)
    reserved = torch.accelerator.memory_reserved()
    assert reserved >= torch.accelerator.memory_allocated() >= 8 * MB
    del x
    settle()
    assert torch.accelerator.memory_reserved() == reserved, "a freed block left the cache without empty_cache"
    y = torch.empty(8 * MB, dtype=torch.uint8, device=dev)
    assert torch.accelerator.memory_reserved() == reserved, "the same size again was not served from the cache"
    del y
    settle()
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved() < reserved


def check_peak_and_reset(dev):
    """max_memory_allocated keeps the peak until reset_peak_memory_stats."""
    settle()
    torch.accelerator.reset_peak_memory_stats()
    base = torch.accelerator.memory_allocated()
    x = torch.empty(16 * MB, dtype=torch.uint8, device=dev)
    del x
    settle()
    assert torch.accelerator.max_memory_allocated() >= base + 16 * MB
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()


def check_memory_stats_keys(dev):
    """memory_stats has the CUDA-style keys, consistent with memory_allocated."""
    settle()
    stats = torch.accelerator.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current"):
        assert key in stats, f"memory_stats() has no {key!r}"
    assert stats["allocated_bytes.all.current"] == torch.accelerator.memory_allocated()


def check_memory_info(dev):
    """get_memory_info gives (free, total) with 0 <= free <= total."""
    free, total = torch.accelerator.get_memory_info()
    assert 0 <= free <= total and total > 0, (free, total)


def check_out_of_memory(dev):
    """An allocation larger than the device raises torch.OutOfMemoryError, and the device keeps working."""
    _, total = torch.accelerator.get_memory_info()
    try:
        torch.empty(2 * total, dtype=torch.uint8, device=dev)
    except torch.OutOfMemoryError:
        pass
    else:
        raise AssertionError("allocating twice the device's memory did not raise torch.OutOfMemoryError")
    assert torch.ones(4, device=dev).sum().item() == 4
