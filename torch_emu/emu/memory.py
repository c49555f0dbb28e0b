"""Memory API of ``torch.emu``: the statistics of the caching device allocator
(the same keys as ``torch.cuda.memory_stats``), through ``torch.accelerator``;
and what ``torch.cuda.memory`` has beyond them: memory pools, the memory
fraction, raw allocations, a pluggable allocator, pinned-memory statistics and
the allocation history with snapshots for ``torch.cuda._memory_viz``."""

import contextlib
import ctypes
import os
import pickle
import sys
import warnings
from collections import OrderedDict
from typing import Any

import torch

from .. import _C
# Defined before this module is imported.
from . import _initialized_device_index, _whole_number_problem, is_initialized

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
    "memory_stats_as_nested_dict",
    "memory_cached",
    "max_memory_cached",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "device_memory_used",
    "list_gpu_processes",
    "OutOfMemoryError",
    "MemPool",
    "use_mem_pool",
    "set_per_process_memory_fraction",
    "get_per_process_memory_fraction",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "caching_allocator_enable",
    "caching_allocator_disabled",
    "EmuPluggableAllocator",
    "change_current_allocator",
    "get_allocator_backend",
    "host_memory_stats",
    "host_memory_stats_as_nested_dict",
    "reset_accumulated_host_memory_stats",
    "reset_peak_host_memory_stats",
    "memory_snapshot",
]

# torch.emu.OutOfMemoryError, as torch.cuda.OutOfMemoryError: the allocator raises it.
OutOfMemoryError = torch.OutOfMemoryError


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


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    """:func:`memory_stats` before flattening: ``{"allocated_bytes": {"all": {"current": ...}}}``."""
    if not is_initialized():
        return {}
    return torch._C._accelerator_getDeviceStats(_initialized_device_index(device))


def memory_cached(device: Any = None) -> int:
    """Deprecated name of :func:`memory_reserved`."""
    return memory_reserved(device)


def max_memory_cached(device: Any = None) -> int:
    """Deprecated name of :func:`max_memory_reserved`."""
    return max_memory_reserved(device)


def reset_max_memory_allocated(device: Any = None) -> None:
    warnings.warn(
        "torch.emu.reset_max_memory_allocated now calls torch.emu.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Any = None) -> None:
    warnings.warn(
        "torch.emu.reset_max_memory_cached now calls torch.emu.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def device_memory_used(device: Any = None) -> int:
    """Bytes of the device in use, as the driver sees them (capacity minus free)."""
    free, total = mem_get_info(device)
    return total - free


def list_gpu_processes(device: Any = None) -> str:
    """The processes using ``device`` and their memory. An emu device's memory is
    a mapping of this process, so this process is the only one that can use it."""
    index = _initialized_device_index(device)
    used = device_memory_used(index)
    if used == 0:
        return f"emu:{index}\nno processes are running"
    return f"emu:{index}\nprocess {os.getpid():>10d} uses {used / (1024 * 1024):>12.3f} MB emu memory"


# LITERALINCLUDE START: PY_MEMPOOL
class MemPool:
    """A private pool of the caching allocator, as ``torch.cuda.MemPool``:
    allocations routed to it by :func:`use_mem_pool` get segments of their own,
    which other allocations never use. ``allocator`` (an
    :class:`EmuPluggableAllocator`) supplies those segments; ``use_on_oom``
    lets other allocations take its cached blocks when the device is full;
    ``no_split`` gives every allocation a segment of its own. When the pool
    object dies, its unused segments go back to the device, and the rest once
    their tensors are freed (at the next :func:`empty_cache`)."""

    def __init__(self, allocator: "EmuPluggableAllocator | None" = None, use_on_oom: bool = False,
                 no_split: bool = False):
        if allocator is not None and not isinstance(allocator, EmuPluggableAllocator):
            raise TypeError(f"MemPool: allocator must be an EmuPluggableAllocator or None, got {type(allocator)}")
        self._device = _initialized_device_index(None)
        self._allocator = allocator
        native = allocator.allocator() if allocator is not None else None
        self._id = tuple(_C._mem_pool_create(self._device, native, use_on_oom, no_split))

    @property
    def id(self) -> tuple[int, int]:
        """The pool's id, a pair of ints (as a graph pool handle)."""
        return self._id

    @property
    def allocator(self) -> "EmuPluggableAllocator | None":
        return self._allocator

    def use_count(self) -> int:
        """How many users the pool has: this object and active use_mem_pool blocks."""
        return _C._mem_pool_use_count(self._device, self._id)

    def snapshot(self, include_traces: bool = True) -> list[dict[str, Any]]:
        """The segments of this pool, as :func:`memory_snapshot` reports them."""
        return memory_snapshot(self._id, include_traces=include_traces)

    def __del__(self):
        if getattr(self, "_id", None) is not None and _C is not None:
            _C._mem_pool_destroy(self._device, self._id)


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: Any = None):
    """Routes the allocations of the current thread (and of the kernels it
    launches) on ``device`` to ``pool`` inside the ``with`` block."""
    if not isinstance(pool, MemPool):
        raise TypeError(f"use_mem_pool expects a torch.emu.MemPool, got {type(pool)}")
    index = _initialized_device_index(device)
    _C._begin_allocate_current_thread_to_pool(index, pool.id)
    try:
        yield
    finally:
        _C._end_allocate_to_pool(index, pool.id)
        _C._release_pool(index, pool.id)
# LITERALINCLUDE END: PY_MEMPOOL


# LITERALINCLUDE START: PY_FRACTION
def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Caps what the caching allocator may reserve on ``device`` to
    ``fraction`` of its capacity; past it, allocations raise
    :class:`torch.OutOfMemoryError` naming the cap."""
    index = _initialized_device_index(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _C._set_memory_fraction(fraction, index)
# LITERALINCLUDE END: PY_FRACTION


def get_per_process_memory_fraction(device: Any = None) -> float:
    return _C._get_memory_fraction(_initialized_device_index(device))


# LITERALINCLUDE START: PY_RAW_ALLOC
def caching_allocator_alloc(size: int, device: Any = None, stream: Any = None) -> int:
    """``size`` bytes from the caching allocator on ``device``, for use on
    ``stream`` (a ``torch.Stream`` or a stream id; default: current stream);
    returns the address. Free it with :func:`caching_allocator_delete`."""
    from .streams import current_stream

    problem = _whole_number_problem("size", size, 0)
    if problem:
        raise ValueError(f"caching_allocator_alloc: {problem}")
    index = _initialized_device_index(device)
    if stream is None:
        stream = current_stream(index)
    if isinstance(stream, torch.Stream):
        if stream.device != torch.device("emu", index):
            raise ValueError(f"caching_allocator_alloc: stream {stream} is not on emu:{index}")
        stream = stream.stream_id
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError("Invalid type for stream argument, must be `torch.emu.Stream` or `int` (a stream id)")
    problem = _whole_number_problem("stream", stream, -(2**63))
    if problem:
        raise ValueError(f"caching_allocator_alloc: {problem}")
    return _C._caching_allocator_raw_alloc(size, index, stream)


def caching_allocator_delete(mem_ptr: int) -> None:
    """Frees memory from :func:`caching_allocator_alloc`. Like CUDA's, raises
    RuntimeError for an address the allocator did not hand out (0 is a no-op)."""
    if isinstance(mem_ptr, bool) or not isinstance(mem_ptr, int):
        raise TypeError(f"caching_allocator_delete: mem_ptr must be an int (an address from "
                        f"caching_allocator_alloc), got {mem_ptr!r}")
    if not 0 <= mem_ptr < 2**64:  # no address: no block of the allocator's
        raise RuntimeError(f"emu allocator: invalid device pointer {mem_ptr}: not allocated by torch.emu's "
                           "allocator")
    _C._caching_allocator_raw_delete(mem_ptr)
# LITERALINCLUDE END: PY_RAW_ALLOC


def caching_allocator_enable(value: bool = True) -> None:
    """Turns caching off (freed memory goes straight back to the device) or on."""
    if is_initialized():
        _C._caching_allocator_enable(value)


@contextlib.contextmanager
def caching_allocator_disabled():
    """Turns caching off inside the ``with`` block."""
    previous = _C._caching_allocator_is_enabled()
    caching_allocator_enable(False)
    try:
        yield
    finally:
        caching_allocator_enable(previous)


# LITERALINCLUDE START: PY_PLUGGABLE
class EmuPluggableAllocator:
    """A user's allocator in a shared library, as ``torch.cuda.memory.CUDAPluggableAllocator``:

        void* alloc_fn(size_t size, int device, void* stream);
        void free_fn(void* ptr, size_t size, int device, void* stream);

    ``alloc_fn`` must return emu device memory: call the runtime's ``emuMalloc``
    (declared in ``csrc/runtime/emu_runtime.h``, exported by ``torch_emu._C``,
    which the library sees when loaded here), or NULL when out of memory.
    Use it with :func:`change_current_allocator` or as ``MemPool(allocator=...)``."""

    def __init__(self, path_to_so_file: str, alloc_fn_name: str, free_fn_name: str):
        # Make the runtime's C API (emuMalloc, emuFree...) visible to the library.
        ctypes.CDLL(_C.__file__, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        self._lib = ctypes.CDLL(path_to_so_file)
        addresses = []
        for name in (alloc_fn_name, free_fn_name):
            try:
                addresses.append(ctypes.cast(getattr(self._lib, name), ctypes.c_void_p).value)
            except AttributeError:
                raise AttributeError(f"EmuPluggableAllocator: {path_to_so_file} has no function {name!r}") from None
        self._allocator = _C._PluggableAllocator(*addresses)

    def allocator(self):
        """The native handle, for change_current_allocator and MemPool."""
        return self._allocator


def change_current_allocator(allocator: EmuPluggableAllocator) -> None:
    """Makes every later emu allocation of the process call ``allocator``.
    Must come before the first emu tensor is created."""
    if not isinstance(allocator, EmuPluggableAllocator):
        raise TypeError(f"change_current_allocator expects an EmuPluggableAllocator, got {type(allocator)}")
    _C._change_current_allocator(allocator.allocator())
# LITERALINCLUDE END: PY_PLUGGABLE


def get_allocator_backend() -> str:
    """``"native"`` (the caching allocator) or ``"pluggable"`` (after change_current_allocator)."""
    return _C._allocator_backend()


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    """Statistics of the pinned host allocator, keyed as ``torch.cuda.host_memory_stats_as_nested_dict``."""
    if not is_initialized():
        return {}
    return _C._host_memory_stats()


def host_memory_stats() -> "OrderedDict[str, Any]":
    """:func:`host_memory_stats_as_nested_dict` flattened: ``allocated_bytes.current``..."""
    result = []

    def flatten(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                flatten(f"{prefix}.{key}" if prefix else key, item)
        else:
            result.append((prefix, value))

    flatten("", host_memory_stats_as_nested_dict())
    return OrderedDict(sorted(result))


def reset_accumulated_host_memory_stats() -> None:
    _C._reset_accumulated_host_memory_stats()


def reset_peak_host_memory_stats() -> None:
    _C._reset_peak_host_memory_stats()


# LITERALINCLUDE START: PY_HISTORY
def _record_memory_history(enabled: "str | None" = "all", context: "str | None" = "all", stacks: str = "all",
                           max_entries: int = sys.maxsize, device: Any = None, clear_history: bool = False,
                           compile_context: bool = False, global_record_annotations: bool = False,
                           skip_actions: "list[str] | None" = None) -> None:
    """Records the allocator's history, as ``torch.cuda.memory._record_memory_history``.

    enabled: None (stop, and drop the history), "state" (remember where live
    blocks were allocated) or "all" (also keep a trace of the last
    ``max_entries`` alloc/free/segment events per device). context: which events
    carry stack frames: None, "state", "alloc" or "all" (frees too). stacks:
    "python" or "all" (Python and C++ frames). clear_history: drop the entries
    recorded so far. skip_actions: actions not to record ("free_requested"...).
    compile_context and global_record_annotations (torch.compile and
    record_function annotations in the snapshot) are not recorded on emu."""
    if isinstance(enabled, bool):  # the legacy form: _record_memory_history(True, ...)
        enabled = "all" if enabled else None
    problem = _whole_number_problem("max_entries", max_entries, 0, sys.maxsize)
    if problem:
        raise ValueError(f"_record_memory_history: {problem}")
    if compile_context or global_record_annotations:
        raise NotImplementedError(
            "_record_memory_history on emu records no compile context or record_function annotations"
        )
    _initialized_device_index(device)
    _C._record_memory_history(enabled, context, stacks, max_entries, clear_history, list(skip_actions or []))


def _snapshot(device: Any = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
    """The allocator's state and history, in ``torch.cuda.memory._snapshot()``'s
    format: ``{"segments": [...], "device_traces": [[...] per device], ...}``."""
    _initialized_device_index(device)
    snapshot = _C._memory_snapshot((0, 0), True)
    if augment_with_fx_traces:
        snapshot = torch.cuda.memory._augment_memory_snapshot_stack_traces(snapshot)
    return snapshot


def _dump_snapshot(filename: str = "dump_snapshot.pickle", augment_with_fx_traces: bool = False) -> None:
    """Pickles :func:`_snapshot` to ``filename``, for
    ``python -m torch.cuda._memory_viz trace_plot filename -o out.html``."""
    snapshot = _snapshot(augment_with_fx_traces=augment_with_fx_traces)
    with open(filename, "wb") as f:
        pickle.dump(snapshot, f)
# LITERALINCLUDE END: PY_HISTORY


def memory_snapshot(mempool_id: "tuple[int, int] | None" = None, include_traces: bool = True) -> list[dict[str, Any]]:
    """The segments of every device (or of the pool ``mempool_id``), as ``torch.cuda.memory_snapshot``."""
    _initialized_device_index(None)
    pool = (0, 0) if mempool_id is None else tuple(mempool_id)
    if len(pool) != 2 or any(_whole_number_problem("mempool_id", part, 0, 2**64 - 1) for part in pool):
        raise ValueError(f"memory_snapshot: mempool_id must be a pool id (MemPool.id), a pair of whole numbers "
                         f"from 0 to 2**64-1, got {mempool_id!r}")
    return _C._memory_snapshot(pool, include_traces)["segments"]
