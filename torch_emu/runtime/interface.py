"""The runtime interface: what a Python object implements to be emu's device.

Each method is one call of the C runtime API (``csrc/runtime/emu_runtime.h``),
with Python types: pointers and handles are ``int``, out-parameters are return
values, and a failure is an :class:`EmuError` carrying the C error code. The
bridge (``csrc/python/RuntimeBindings.cpp``) keeps what is C's business: the
current device of each thread (so ``malloc`` and ``stream_create`` receive the
device), null out-pointers, and turning ``EmuError`` into the ``emuError_t``
and message the integration core sees.

Methods are called from any thread that uses emu, with the GIL held; work
handed to ``launch_kernel`` and ``launch_host_func`` is called without it.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass
from typing import Callable, Optional


# LITERALINCLUDE START: RUNTIME_ERRORS
class Error(enum.IntEnum):
    """``emuError_t``: the code a failing call reports."""

    INVALID_VALUE = 1
    MEMORY_ALLOCATION = 2
    INITIALIZATION_ERROR = 3
    INVALID_DEVICE = 4
    INVALID_DEVICE_POINTER = 5
    INVALID_RESOURCE_HANDLE = 6
    NOT_READY = 7
    LAUNCH_FAILURE = 8
    DEVICE_LOST = 11
    ECC_UNCORRECTABLE = 12
    NOT_SUPPORTED = 13
    UNKNOWN = 14


class EmuError(Exception):
    """A failed runtime call: ``code`` is what the C caller gets, the message
    becomes ``emuGetLastErrorMessage()`` after the call's name."""

    def __init__(self, code: Error, message: str) -> None:
        super().__init__(message)
        self.code = Error(code)
# LITERALINCLUDE END: RUNTIME_ERRORS


class MemoryType(enum.IntEnum):
    UNREGISTERED = 0  # ordinary (pageable) host memory
    HOST = 1  # pinned host memory from malloc_host
    DEVICE = 2


class MemcpyKind(enum.IntEnum):
    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int  # host threads a kernel may use


#: Work handed to a launch: calling it runs it here and now, without the GIL.
#: A kernel returns ``None`` or the message of its failure; a host function
#: returns ``None``.
Work = Callable[[], Optional[str]]


# LITERALINCLUDE START: RUNTIME_INTERFACE
class Runtime(abc.ABC):
    """A device runtime. The semantics of every method are those of the C call
    named in its docstring (``emu_runtime.h``)."""

    #: Said in errors (``not provided by the '<name>' runtime``) and by
    #: ``torch_emu.runtime.active()``.
    name = "python"

    # -- devices --------------------------------------------------------------
    @abc.abstractmethod
    def device_count(self) -> int:
        """emuGetDeviceCount. Called once; it must not change."""

    @abc.abstractmethod
    def device_properties(self, device: int) -> DeviceProperties:
        """emuGetDeviceProperties."""

    @abc.abstractmethod
    def mem_get_info(self, device: int) -> tuple[int, int]:
        """emuMemGetInfo: (free bytes, total bytes)."""

    @abc.abstractmethod
    def synchronize_device(self, device: int) -> None:
        """emuDeviceSynchronize: waits for every stream of ``device``; raises
        the first unreported kernel failure among them."""

    # -- memory ---------------------------------------------------------------
    @abc.abstractmethod
    def malloc(self, device: int, size: int) -> int:
        """emuMalloc: device memory; EmuError(MEMORY_ALLOCATION) when full."""

    @abc.abstractmethod
    def free(self, ptr: int) -> None:
        """emuFree."""

    @abc.abstractmethod
    def malloc_host(self, size: int) -> int:
        """emuMallocHost: pinned host memory."""

    @abc.abstractmethod
    def free_host(self, ptr: int) -> None:
        """emuFreeHost."""

    @abc.abstractmethod
    def pointer_attributes(self, ptr: int) -> tuple[MemoryType, int]:
        """emuPointerGetAttributes: (type, device or -1), interior pointers too."""

    @abc.abstractmethod
    def memcpy(self, dst: int, src: int, size: int, kind: MemcpyKind) -> None:
        """emuMemcpy: waits for the streams of the devices involved, then copies."""

    @abc.abstractmethod
    def memcpy_async(self, dst: int, src: int, size: int, kind: MemcpyKind, stream: int) -> None:
        """emuMemcpyAsync: ordered on ``stream``; complete on return when a side
        is pageable host memory."""

    # -- streams --------------------------------------------------------------
    def stream_priority_range(self) -> tuple[int, int]:
        """emuDeviceGetStreamPriorityRange: (least, greatest)."""
        return 0, -1

    @abc.abstractmethod
    def stream_create(self, device: int, priority: int) -> int:
        """emuStreamCreateWithPriority: a non-zero handle."""

    @abc.abstractmethod
    def stream_destroy(self, stream: int) -> None:
        """emuStreamDestroy: drains it first."""

    @abc.abstractmethod
    def stream_device(self, stream: int) -> int:
        """emuStreamGetDevice: any value that is not a live stream raises
        EmuError(INVALID_RESOURCE_HANDLE)."""

    @abc.abstractmethod
    def stream_priority(self, stream: int) -> int:
        """emuStreamGetPriority."""

    @abc.abstractmethod
    def stream_query(self, stream: int) -> bool:
        """emuStreamQuery: True when idle; raises an unreported kernel failure."""

    @abc.abstractmethod
    def stream_pending(self, stream: int) -> bool:
        """emuStreamGetPendingWork: work queued or running, never raises it."""

    @abc.abstractmethod
    def stream_synchronize(self, stream: int) -> None:
        """emuStreamSynchronize: raises an unreported kernel failure, once."""

    @abc.abstractmethod
    def stream_wait_event(self, stream: int, event: int) -> None:
        """emuStreamWaitEvent."""

    # -- work -----------------------------------------------------------------
    @abc.abstractmethod
    def launch_kernel(self, stream: int, kernel: Work, asynchronous: bool) -> None:
        """emuLaunchKernel (may run ``kernel`` here when the stream is idle, and
        then raises its failure) or emuLaunchKernelAsync (``asynchronous``:
        never here, unless called from work running on ``stream``)."""

    @abc.abstractmethod
    def launch_host_func(self, stream: int, fn: Work, asynchronous: bool) -> None:
        """emuLaunchHostFunc / emuLaunchHostFuncAsync."""

    # -- events ---------------------------------------------------------------
    @abc.abstractmethod
    def event_create(self, timing: bool) -> int:
        """emuEventCreateWithFlags: a non-zero handle."""

    @abc.abstractmethod
    def event_destroy(self, event: int) -> None:
        """emuEventDestroy."""

    @abc.abstractmethod
    def event_record(self, event: int, stream: int) -> None:
        """emuEventRecord."""

    @abc.abstractmethod
    def event_query(self, event: int) -> bool:
        """emuEventQuery: True when its last record completed (or it has none)."""

    @abc.abstractmethod
    def event_synchronize(self, event: int) -> None:
        """emuEventSynchronize."""

    @abc.abstractmethod
    def event_elapsed_time(self, start: int, end: int) -> float:
        """emuEventElapsedTime: milliseconds between two completed, timed records on one device
        (EmuError(INVALID_RESOURCE_HANDLE) for records on two devices)."""
# LITERALINCLUDE END: RUNTIME_INTERFACE
