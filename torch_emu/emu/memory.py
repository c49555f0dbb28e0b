"""Memory API of ``torch.emu``: the statistics of the caching device allocator
(the same keys as ``torch.cuda.memory_stats``), through ``torch.accelerator``."""

from collections import OrderedDict
from typing import Any

import torch

from . import _initialized_device_index  # defined before this module is imported

__all__ = [
    "memory_stats",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "memory_summary",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "empty_cache",
    "mem_get_info",
]


# LITERALINCLUDE START: PY_MEMORY
def memory_stats(device: Any = None) -> "OrderedDict[str, Any]":
    """Allocator statistics of ``device``, keyed like ``torch.cuda.memory_stats``
    (``allocated_bytes.all.current``, ``num_ooms``...)."""
    return torch.accelerator.memory.memory_stats(_initialized_device_index(device))


def memory_allocated(device: Any = None) -> int:
    """Bytes occupied by tensors on ``device``."""
    return torch.accelerator.memory.memory_allocated(_initialized_device_index(device))
# LITERALINCLUDE END: PY_MEMORY


def max_memory_allocated(device: Any = None) -> int:
    return torch.accelerator.memory.max_memory_allocated(_initialized_device_index(device))


def memory_reserved(device: Any = None) -> int:
    """Bytes held by the caching allocator (in use or cached) on ``device``."""
    return torch.accelerator.memory.memory_reserved(_initialized_device_index(device))


def max_memory_reserved(device: Any = None) -> int:
    return torch.accelerator.memory.max_memory_reserved(_initialized_device_index(device))


def reset_peak_memory_stats(device: Any = None) -> None:
    torch.accelerator.memory.reset_peak_memory_stats(_initialized_device_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    torch.accelerator.memory.reset_accumulated_memory_stats(_initialized_device_index(device))


def empty_cache() -> None:
    """Returns every unused cached block of every device to the device."""
    from . import is_initialized

    if is_initialized():
        torch.accelerator.memory.empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the device itself, as the driver sees them."""
    return torch.accelerator.memory.get_memory_info(_initialized_device_index(device))


def _format_bytes(n: int) -> str:
    for unit in ("B  ", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:6.0f} {unit}" if unit == "B  " else f"{n:6.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A human-readable table of :func:`memory_stats`, like
    ``torch.cuda.memory_summary``: current, peak, allocated and freed totals."""
    index = _initialized_device_index(device)
    stats = memory_stats(index)
    rows = [
        ("Allocated memory", "allocated_bytes", _format_bytes),
        ("Active memory", "active_bytes", _format_bytes),
        ("Requested memory", "requested_bytes", _format_bytes),
        ("Device reserved memory", "reserved_bytes", _format_bytes),
        ("Non-releasable memory", "inactive_split_bytes", _format_bytes),
        ("Allocations", "allocation", str),
        ("Active allocs", "active", str),
        ("Device reserved segments", "segment", str),
        ("Non-releasable allocs", "inactive_split", str),
    ]
    pools = ("all",) if abbreviated else ("all", "large_pool", "small_pool")
    width = 84
    lines = [
        "=" * width,
        f" emu memory summary, device ID {index}".ljust(width),
        "-" * width,
        f"{'Metric':<32}| " + " | ".join(f"{h:>10}" for h in ("Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed")),
        "-" * width,
    ]
    for title, key, fmt in rows:
        for pool in pools:
            name = title if pool == "all" else f"      from {pool.replace('_pool', '')} pool"
            values = [stats.get(f"{key}.{pool}.{kind}", 0) for kind in ("current", "peak", "allocated", "freed")]
            lines.append(f"{name:<32}| " + " | ".join(f"{fmt(v):>10}" for v in values))
        lines.append("-" * width)
    lines.append(f"{'Allocation retries':<32}| {stats.get('num_alloc_retries', 0):>10}")
    lines.append(f"{'Out-of-memory errors':<32}| {stats.get('num_ooms', 0):>10}")
    lines.append("=" * width)
    return "\n".join(lines) + "\n"
