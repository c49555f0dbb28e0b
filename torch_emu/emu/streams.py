"""Streams and events of ``torch.emu``: thin subclasses of ``torch.Stream`` and
``torch.Event``, which reach the device through the registered guard; and the
sync debug mode, which reports operations that make the host wait for them."""

from typing import Any, Optional

import torch

from . import _initialized_device_index  # defined before this module is imported

from .. import _C

__all__ = [
    "Stream",
    "Event",
    "ExternalStream",
    "get_stream_from_external",
    "StreamContext",
    "stream",
    "current_stream",
    "default_stream",
    "set_stream",
    "set_sync_debug_mode",
    "get_sync_debug_mode",
]


# LITERALINCLUDE START: PY_STREAM
class Stream(torch.Stream):
    """An emu stream: work on it runs in order on its own worker. ``priority``
    0 is normal, -1 high (lower is higher, as in CUDA)."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if kwargs:  # wrapping an existing stream (stream_id/device_index/device_type)
            return super().__new__(cls, priority=priority, **kwargs)
        index = _initialized_device_index(device)
        return super().__new__(cls, device=torch.device("emu", index), priority=priority)

    @property
    def priority(self) -> int:
        return _C._stream_priority(self.stream_id, self.device_index)

    def __repr__(self) -> str:
        return f"<torch.emu.Stream device={self.device} stream_id={self.stream_id} priority={self.priority}>"
# LITERALINCLUDE END: PY_STREAM


# LITERALINCLUDE START: PY_EXTERNAL_STREAM
def _external_stream_data(stream_ptr: int, device: Any) -> dict:
    """torch.Stream's arguments for the runtime stream ``stream_ptr`` (an
    ``emuStream_t`` as an int); the runtime checks that it is a live stream,
    on ``device`` if one is given."""
    from . import _get_device_index, _lazy_init

    if isinstance(stream_ptr, bool) or not isinstance(stream_ptr, int):
        raise TypeError(f"stream_ptr must be an int (an emuStream_t handle), got {type(stream_ptr).__name__}")
    _lazy_init()
    index = -1 if device is None else _get_device_index(device)
    stream_id, device_index, device_type = _C._stream_from_external(stream_ptr, index)
    return {"stream_id": stream_id, "device_index": device_index, "device_type": device_type}


class ExternalStream(Stream):
    """Wraps a stream created outside PyTorch, e.g. by a library calling the
    emu runtime (``emuStreamCreateWithPriority``): work PyTorch puts on it
    runs on that runtime stream. Its owner keeps it alive while in use.
    ``device`` defaults to the device the stream was created on."""

    def __new__(cls, stream_ptr: int, device: Any = None, **kwargs):
        return super().__new__(cls, **_external_stream_data(stream_ptr, device), **kwargs)


def get_stream_from_external(data_ptr: int, device: Any = None) -> Stream:
    """A :class:`Stream` over an externally created runtime stream (see
    :class:`ExternalStream`)."""
    return Stream(**_external_stream_data(data_ptr, device))
# LITERALINCLUDE END: PY_EXTERNAL_STREAM


class _EventMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == "emu"


# LITERALINCLUDE START: PY_EVENT
class Event(metaclass=_EventMeta):
    """An emu event: records a point in a stream; can be waited on by other
    streams, queried, synchronised and timed (``enable_timing=True``).

    It is a ``torch.Event`` on emu (PyTorch's event methods only accept that
    exact type), so ``isinstance(e, torch.emu.Event)`` checks the device."""

    def __new__(
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, external: bool = False
    ):
        # ``external`` only changes how a record is captured into a graph;
        # outside capture it has no effect, as on CUDA.
        if interprocess:
            raise NotImplementedError("emu events cannot be shared between processes (interprocess=True)")
        return torch.Event(device="emu", enable_timing=enable_timing, blocking=blocking)
# LITERALINCLUDE END: PY_EVENT


def _wrap(raw: torch.Stream) -> Stream:
    return Stream(stream_id=raw.stream_id, device_index=raw.device_index, device_type=raw.device_type)


def current_stream(device: Any = None) -> Stream:
    """The stream work on ``device`` (default: current device) goes to."""
    return _wrap(torch._C._accelerator_getStream(_initialized_device_index(device)))


def default_stream(device: Any = None) -> Stream:
    """The default stream (id 0) of ``device``."""
    index = _initialized_device_index(device)
    return Stream(stream_id=0, device_index=index, device_type=current_stream(index).device_type)


def set_stream(stream: torch.Stream) -> None:
    """Makes ``stream`` current (and its device the current device)."""
    if stream is None:
        return
    if stream.device.type != "emu":
        raise ValueError(f"Expected an emu stream, but got a stream on {stream.device}")
    torch._C._accelerator_setStream(stream)


class StreamContext:
    """Context manager making ``stream`` current on its device; restores the
    previous stream and device on exit. ``None`` makes it a no-op."""

    def __init__(self, stream: Optional[torch.Stream]):
        self.stream = stream
        self.prev_stream: Optional[torch.Stream] = None
        self.prev_device = -1

    def __enter__(self):
        if self.stream is None:
            return None
        from . import current_device

        self.prev_device = current_device()
        self.prev_stream = current_stream(self.stream.device_index)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        torch._C._accelerator_setStream(self.prev_stream)
        from . import set_device

        set_device(self.prev_device)
        return False


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    """``with torch.emu.stream(s):`` runs the block's work on ``s``."""
    return StreamContext(stream)


# LITERALINCLUDE START: PY_SYNC_DEBUG
_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """Reports operations that make the host wait for the device (``.item()``,
    blocking copies, ``nonzero``...): ``"default"``/0 silent, ``"warn"``/1 a
    warning, ``"error"``/2 a RuntimeError, as ``torch.cuda.set_sync_debug_mode``."""
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG_MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = _SYNC_DEBUG_MODES[debug_mode]
    _C._set_sync_debug_mode(debug_mode)


def get_sync_debug_mode() -> int:
    """The current sync debug mode: 0 default, 1 warn, 2 error."""
    return _C._get_sync_debug_mode()
# LITERALINCLUDE END: PY_SYNC_DEBUG
