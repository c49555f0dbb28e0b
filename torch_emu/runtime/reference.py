"""The reference runtime in Python (``TORCH_EMU_RUNTIME=python``).

The same device as the native runtime, in a few hundred lines a vendor can
read in one sitting: device memory is one anonymous memory mapping per device
that this object owns, handed out best-fit in pages; pinned host memory is a
mapping per allocation; streams are worker threads (``streams.py``); events
are timestamps. Copies are ``ctypes.memmove``, which runs without the GIL.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
import os
import threading
from typing import Optional

from . import config
from .interface import DeviceProperties, EmuError, Error, MemcpyKind, MemoryType, Runtime, Work
from .streams import Event, Record, Stream

_PAGE = mmap.PAGESIZE
# Which sides of a copy of each kind are device memory: (destination, source).
_DEVICE_SIDES = {MemcpyKind.HOST_TO_HOST: (False, False), MemcpyKind.HOST_TO_DEVICE: (True, False),
                 MemcpyKind.DEVICE_TO_HOST: (False, True), MemcpyKind.DEVICE_TO_DEVICE: (True, True)}


def _pages(size: int) -> int:
    return -(-size // _PAGE) * _PAGE


def _address(mapping: mmap.mmap) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(mapping))


def _format(size: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} bytes" if unit == "bytes" else f"{size:.2f} {unit}"
        size /= 1024
    raise AssertionError


# LITERALINCLUDE START: REFERENCE_ARENA
class Arena:
    """One device's memory: a mapping of its capacity, mapped on first use
    (pages are only committed when touched), and a best-fit free list."""

    def __init__(self, device: int, capacity: int) -> None:
        self.device = device
        self.capacity = capacity
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
        self.mapping = mmap.mmap(-1, capacity, flags=flags)
        self.base = _address(self.mapping)
        self.free_ranges: list[tuple[int, int]] = [(0, capacity)]  # (offset, size), by offset
        self.live: dict[int, int] = {}  # offset -> size
        self.allocated = 0

    def allocate(self, size: int) -> int:
        size = _pages(size)
        fits = [(length, offset) for offset, length in self.free_ranges if length >= size]
        if not fits:
            largest = max((length for _, length in self.free_ranges), default=0)
            free = self.capacity - self.allocated
            raise EmuError(Error.MEMORY_ALLOCATION,
                           f"out of memory on emu:{self.device}: tried to allocate {_format(size)} with "
                           f"{_format(free)} free of {_format(self.capacity)} capacity"
                           + (f"; the largest free block is {_format(largest)}" if size <= free else ""))
        length, offset = min(fits)
        index = self.free_ranges.index((offset, length))
        if length == size:
            del self.free_ranges[index]
        else:
            self.free_ranges[index] = (offset + size, length - size)
        self.live[offset] = size
        self.allocated += size
        return self.base + offset

    def release(self, ptr: int) -> None:
        offset = ptr - self.base
        size = self.live.pop(offset, None)
        if size is None:
            raise EmuError(Error.INVALID_DEVICE_POINTER,
                           f"{ptr:#x} is not the start of a live allocation on emu:{self.device}")
        self.allocated -= size
        # The next user of the range sees zeros, and freed pages leave the process.
        self.mapping.madvise(mmap.MADV_DONTNEED, offset, size)
        index = bisect.bisect(self.free_ranges, (offset, size))
        self.free_ranges.insert(index, (offset, size))
        # Coalesce with the neighbours.
        if index + 1 < len(self.free_ranges) and offset + size == self.free_ranges[index + 1][0]:
            size += self.free_ranges.pop(index + 1)[1]
            self.free_ranges[index] = (offset, size)
        if index > 0 and sum(self.free_ranges[index - 1]) == offset:
            previous = self.free_ranges.pop(index - 1)
            self.free_ranges[index - 1] = (previous[0], previous[1] + size)

    def contains(self, ptr: int, size: int = 1) -> bool:
        return self.base <= ptr and ptr + size <= self.base + self.capacity
# LITERALINCLUDE END: REFERENCE_ARENA


class ReferenceRuntime(Runtime):
    name = "python"

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards memory and the handle tables
        self._count: Optional[int] = None  # read at the first call that needs it: _configure
        self._capacity, self._config_error = 0, None
        self._arenas: list[Optional[Arena]] = []
        self._pinned: dict[int, tuple[mmap.mmap, int]] = {}  # base -> (mapping, size)
        self._pinned_bases: list[int] = []  # sorted
        self._streams: dict[int, Stream] = {}
        self._events: dict[int, Event] = {}

    # -- devices ---------------------------------------------------------------
    def _configure(self) -> None:
        """Reads the device count and memory once, at the device's first use, as the native runtime
        does: a program may set them after importing torch. A bad configuration fails every call
        that needs it, as in the native runtime: importing torch still works and emu is not
        available."""
        if self._count is not None:
            return
        with self._lock:
            if self._count is None:
                try:
                    count, self._capacity = config.device_count(), config.device_memory()
                except ValueError as e:
                    count, self._config_error = 0, str(e)
                self._arenas = [None] * count
                self._count = count

    def _check_config(self) -> None:
        self._configure()
        if self._config_error is not None:
            raise EmuError(Error.INITIALIZATION_ERROR, f"emu runtime initialisation failed: {self._config_error}")

    def device_count(self) -> int:
        self._check_config()
        return self._count

    def device_properties(self, device: int) -> DeviceProperties:
        self._configure()
        return DeviceProperties(name="emu (emulated accelerator)", total_memory=self._capacity, major=1,
                                minor=0, multi_processor_count=os.cpu_count() or 1)

    def mem_get_info(self, device: int) -> tuple[int, int]:
        self._configure()
        arena = self._arenas[device]
        return self._capacity - (arena.allocated if arena else 0), self._capacity

    def _device_streams(self, device: int) -> list[tuple[int, Stream]]:
        with self._lock:
            return [(handle, s) for handle, s in self._streams.items() if s.device == device]

    def _drain_device(self, device: int) -> list[tuple[int, Stream]]:
        """Waits for every stream of ``device``; returns them."""
        streams = self._device_streams(device)
        for _, stream in streams:
            stream.drain()
        return streams

    def synchronize_device(self, device: int) -> None:
        for handle, stream in self._drain_device(device):
            stream.take_failure(handle)

    # -- memory ----------------------------------------------------------------
    def malloc(self, device: int, size: int) -> int:
        if size == 0:
            return 0
        self._configure()
        with self._lock:
            if self._arenas[device] is None:
                self._arenas[device] = Arena(device, self._capacity)
            return self._arenas[device].allocate(size)

    def _arena_of(self, ptr: int, size: int = 1) -> Optional[Arena]:
        return next((a for a in self._arenas if a is not None and a.contains(ptr, size)), None)

    def free(self, ptr: int) -> None:
        arena = self._arena_of(ptr)
        if arena is None:
            raise EmuError(Error.INVALID_DEVICE_POINTER, f"{ptr:#x} is not emu device memory")
        # Queued kernels may still use the memory: wait for the device first,
        # unless this is work running on one of its streams.
        streams = [stream for _, stream in self._device_streams(arena.device)]
        if not any(stream.runs_here() for stream in streams):
            for stream in streams:
                stream.drain()
        with self._lock:
            arena.release(ptr)

    def malloc_host(self, size: int) -> int:
        self._check_config()
        if size == 0:
            return 0
        size = _pages(size)
        mapping = mmap.mmap(-1, size)
        base = _address(mapping)
        with self._lock:
            self._pinned[base] = (mapping, size)
            bisect.insort(self._pinned_bases, base)
        return base

    def free_host(self, ptr: int) -> None:
        with self._lock:
            if ptr not in self._pinned:
                raise EmuError(Error.INVALID_VALUE, f"{ptr:#x} is not pinned memory from emuMallocHost")
            del self._pinned[ptr]  # the mapping goes with its last reference
            self._pinned_bases.remove(ptr)

    def _pinned_range(self, ptr: int, size: int) -> bool:
        index = bisect.bisect(self._pinned_bases, ptr) - 1
        if index < 0:
            return False
        base = self._pinned_bases[index]
        return ptr + size <= base + self._pinned[base][1]

    def pointer_attributes(self, ptr: int) -> tuple[MemoryType, int]:
        arena = self._arena_of(ptr)
        if arena is not None:
            return MemoryType.DEVICE, arena.device
        with self._lock:
            pinned = self._pinned_range(ptr, 1)
        return (MemoryType.HOST if pinned else MemoryType.UNREGISTERED), -1

    # LITERALINCLUDE START: REFERENCE_COPY
    def _plan_copy(self, dst: int, src: int, size: int, kind: int) -> tuple[list[int], bool]:
        """Checks both sides against ``kind``; returns the devices involved and
        whether a host side is pageable."""
        try:
            kind = MemcpyKind(kind)
        except ValueError:
            raise EmuError(Error.INVALID_VALUE, f"invalid memcpy kind {kind}") from None
        want = _DEVICE_SIDES[kind]
        devices, pageable = [], False
        for side, ptr, want_device in (("destination", dst, want[0]), ("source", src, want[1])):
            if ptr == 0:
                raise EmuError(Error.INVALID_VALUE, f"{kind.name} {side} is null")
            arena = self._arena_of(ptr)
            if want_device != (arena is not None):
                what = "is not emu device memory" if want_device else f"is emu device memory (emu:{arena.device})"
                raise EmuError(Error.INVALID_VALUE, f"{kind.name} {side} {ptr:#x} {what}")
            if arena is not None:
                if not arena.contains(ptr, size):
                    raise EmuError(Error.INVALID_VALUE, f"{kind.name} {side} range runs past the end of "
                                   f"emu:{arena.device}'s memory")
                devices.append(arena.device)
            else:
                with self._lock:
                    pageable = pageable or not self._pinned_range(ptr, size)
        return devices, pageable

    def memcpy(self, dst: int, src: int, size: int, kind: int) -> None:
        if size == 0:
            return
        devices, _ = self._plan_copy(dst, src, size, kind)
        for device in set(devices):
            self._drain_device(device)
        ctypes.memmove(dst, src, size)

    def memcpy_async(self, dst: int, src: int, size: int, kind: int, stream: int) -> None:
        queue = self._stream(stream)
        if size == 0:
            return
        _, pageable = self._plan_copy(dst, src, size, kind)

        def copy() -> None:
            ctypes.memmove(dst, src, size)

        seq, _ = queue.submit(copy, allow_inline=True)
        if pageable:  # the caller may reuse pageable memory as soon as we return
            queue.wait_until(seq)
    # LITERALINCLUDE END: REFERENCE_COPY

    # -- streams ---------------------------------------------------------------
    @staticmethod
    def _live(table: dict, handle: int, what: str):
        found = table.get(handle)
        if found is None:
            raise EmuError(Error.INVALID_RESOURCE_HANDLE, f"{handle:#x} is not a live emu {what}")
        return found

    def _stream(self, handle: int) -> Stream:
        return self._live(self._streams, handle, "stream")

    def stream_create(self, device: int, priority: int) -> int:
        stream = Stream(device, min(0, max(-1, priority)))
        with self._lock:
            self._streams[id(stream)] = stream
        return id(stream)

    def stream_destroy(self, stream: int) -> None:
        queue = self._stream(stream)
        if queue.runs_here():
            raise EmuError(Error.INVALID_VALUE, "cannot destroy a stream from work running on it")
        queue.stop()
        with self._lock:
            del self._streams[stream]

    def stream_device(self, stream: int) -> int:
        return self._stream(stream).device

    def stream_priority(self, stream: int) -> int:
        return self._stream(stream).priority

    def stream_query(self, stream: int) -> bool:
        queue = self._stream(stream)
        queue.take_failure(stream)
        return not queue.pending()

    def stream_pending(self, stream: int) -> bool:
        return self._stream(stream).pending()

    def stream_synchronize(self, stream: int) -> None:
        queue = self._stream(stream)
        queue.drain()
        queue.take_failure(stream)

    def stream_wait_event(self, stream: int, event: int) -> None:
        queue, record = self._stream(stream), self._event(event).record
        if record is None or record.done.is_set():
            return

        def wait() -> None:
            record.done.wait()

        queue.submit(wait, allow_inline=False)  # waiting is the worker's job

    # -- work ------------------------------------------------------------------
    # LITERALINCLUDE START: REFERENCE_LAUNCH
    def launch_kernel(self, stream: int, kernel: Work, asynchronous: bool) -> None:
        queue = self._stream(stream)
        _, failure = queue.submit(kernel, allow_inline=not asynchronous)
        if failure is not None:
            raise EmuError(Error.LAUNCH_FAILURE, f"the kernel failed on emu:{queue.device}: {failure}")
    # LITERALINCLUDE END: REFERENCE_LAUNCH

    def launch_host_func(self, stream: int, fn: Work, asynchronous: bool) -> None:
        self._stream(stream).submit(fn, allow_inline=not asynchronous)

    # -- events ----------------------------------------------------------------
    def _event(self, handle: int) -> Event:
        return self._live(self._events, handle, "event")

    def event_create(self, timing: bool) -> int:
        event = Event(timing)
        with self._lock:
            self._events[id(event)] = event
        return id(event)

    def event_destroy(self, event: int) -> None:
        self._event(event)
        with self._lock:
            del self._events[event]  # queued records and waits keep what they need

    def event_record(self, event: int, stream: int) -> None:
        target, queue = self._event(event), self._stream(stream)
        record = Record(queue)
        target.record = record
        queue.submit(record.complete, allow_inline=True)

    def event_query(self, event: int) -> bool:
        record = self._event(event).record
        return record is None or record.done.is_set()

    def event_synchronize(self, event: int) -> None:
        record = self._event(event).record
        # From work running on the recording stream, the record is queued
        # behind the caller: everything it covers is done already.
        if record is not None and not record.stream.runs_here():
            record.done.wait()

    def event_elapsed_time(self, start: int, end: int) -> float:
        records = []
        for which, handle in (("start", start), ("end", end)):
            event = self._event(handle)
            if not event.timing:
                raise EmuError(Error.INVALID_RESOURCE_HANDLE, f"{which} event was created with timing disabled")
            if event.record is None:
                raise EmuError(Error.NOT_READY, f"{which} event was never recorded")
            if not event.record.done.is_set():
                raise EmuError(Error.NOT_READY, f"{which} event has not completed yet")
            records.append(event.record)
        first, last = records
        if first.stream.device != last.stream.device:  # as CUDA's cudaEventElapsedTime
            raise EmuError(Error.INVALID_RESOURCE_HANDLE,
                           f"the start event was recorded on emu:{first.stream.device} and the end event on "
                           f"emu:{last.stream.device}; both must be recorded on the same device")
        return (last.stamp - first.stamp) / 1e6
