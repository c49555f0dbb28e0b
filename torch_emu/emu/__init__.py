"""``torch.emu``: the device-runtime API of ``torch.cuda``, for the emu device.

Device management and lazy initialisation live here; streams and events in
``streams.py``, memory in ``memory.py``, random numbers in ``random.py``.
"""

import os
import threading
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .. import _C

__all__ = [
    "is_available",
    "is_initialized",
    "init",
    "device_count",
    "current_device",
    "set_device",
    "device",
    "device_of",
    "synchronize",
    "get_device_properties",
    "get_device_name",
    "get_device_capability",
]

# LITERALINCLUDE START: LAZY_INIT
_initialized = False
_in_bad_fork = False
_init_lock = threading.Lock()
# Calls made before first use (torch.manual_seed...), by key: a repeated call
# replaces the earlier one, so seeding in a loop does not pile them up.
_queued_calls: dict[str, Callable[[], None]] = {}


def _after_fork_in_child() -> None:
    global _in_bad_fork
    _in_bad_fork = _initialized


os.register_at_fork(after_in_child=_after_fork_in_child)


def is_initialized() -> bool:
    """Whether the emu runtime has been started by this process."""
    return _initialized and not _in_bad_fork


def _is_in_bad_fork() -> bool:
    return _in_bad_fork


def _lazy_call(key: str, call: Callable[[], None]) -> None:
    """Runs ``call`` now if emu is initialised, else at initialisation."""
    if is_initialized():
        call()
    else:
        _queued_calls.pop(key, None)
        _queued_calls[key] = call


def _lazy_init() -> None:
    """Starts the runtime at first real use (PyTorch calls this too, before it
    creates the first emu tensor)."""
    global _initialized
    if is_initialized():
        return
    with _init_lock:
        if is_initialized():
            return
        if _in_bad_fork:
            raise RuntimeError(
                "Cannot re-initialize emu in forked subprocess. To use emu with "
                "multiprocessing, you must use the 'spawn' start method"
            )
        _C._init()  # raises the runtime's own error (e.g. bad configuration)
        _initialized = True
        calls = list(_queued_calls.values())
        _queued_calls.clear()
        for call in calls:
            call()


def init() -> None:
    """Initialises emu's state explicitly (normally done lazily)."""
    _lazy_init()
# LITERALINCLUDE END: LAZY_INIT


def is_available() -> bool:
    """Whether emu devices can be used (never raises)."""
    return device_count() > 0


def device_count() -> int:
    """Number of emu devices (``TORCH_EMU_DEVICE_COUNT``, default 2)."""
    if _in_bad_fork:
        return 0
    return _C._device_count()


def _get_device_index(device: Any, optional: bool = True) -> int:
    """Device index of ``device`` (int, ``"emu:1"``, ``torch.device``); the
    current device for ``None`` or an index-less emu device."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "emu":
            raise ValueError(f"Expected an emu device, but got: {device}")
        device = device.index
    if device is None:
        if not optional:
            raise ValueError("Expected an emu device with an index, but got None")
        return current_device()
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"Invalid device {device!r}: expected an int, str or torch.device")
    return device


def _initialized_device_index(device: Any) -> int:
    """Starts emu if needed and resolves ``device`` to an index (for the
    memory, stream and random modules)."""
    _lazy_init()
    return _get_device_index(device)


def current_device() -> int:
    """Index of the current emu device of this thread."""
    _lazy_init()
    return _C._current_device()


def set_device(device: Any) -> None:
    """Sets the current emu device of this thread."""
    index = _get_device_index(device)
    if index >= 0:
        _lazy_init()
        _C._set_device(index)


class device:
    """Context manager that makes ``device`` current inside its block."""

    def __init__(self, device: Any):
        self.idx = _get_device_index(device, optional=True) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = current_device()
            if self.prev_idx != self.idx:
                _C._set_device(self.idx)

    def __exit__(self, *exc):
        if self.idx >= 0 and self.prev_idx != self.idx:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of a tensor (or storage) current;
    does nothing for objects that are not on emu."""

    def __init__(self, obj: Any):
        on_emu = getattr(obj, "device", None) is not None and obj.device.type == "emu"
        super().__init__(obj.device if on_emu else None)


def synchronize(device: Any = None) -> None:
    """Waits for all work on every stream of ``device`` (default: current)."""
    _lazy_init()
    _C._synchronize(_get_device_index(device))


@dataclass(frozen=True)
class _EmuDeviceProperties:
    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int

    def __repr__(self) -> str:
        return (
            f"_EmuDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count})"
        )


def get_device_properties(device: Any = None) -> _EmuDeviceProperties:
    _lazy_init()
    return _EmuDeviceProperties(**_C._get_device_properties(_get_device_index(device)))


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    props = get_device_properties(device)
    return props.major, props.minor


from . import graphs, memory, random, streams  # noqa: E402
from .graphs import *  # noqa: E402,F401,F403
from .memory import *  # noqa: E402,F401,F403
from .random import *  # noqa: E402,F401,F403
from .streams import *  # noqa: E402,F401,F403

__all__ += graphs.__all__ + memory.__all__ + random.__all__ + streams.__all__

# AMP: torch.autocast("emu") asks the device module for get_amp_supported_dtype().
from . import amp  # noqa: E402
from .amp import (  # noqa: E402
    get_amp_supported_dtype,
    get_autocast_dtype,
    is_autocast_enabled,
    is_bf16_supported,
    set_autocast_dtype,
    set_autocast_enabled,
)

__all__ += [
    "amp",
    "get_amp_supported_dtype",
    "get_autocast_dtype",
    "is_autocast_enabled",
    "is_bf16_supported",
    "set_autocast_dtype",
    "set_autocast_enabled",
]
