"""``torch.emu``: the device-runtime API of ``torch.cuda``, for the emu device.

Device management and lazy initialisation live here; streams and events in
``streams.py``, memory in ``memory.py``, random numbers in ``random.py``,
runtime errors in ``errors.py``, utilization in ``monitor.py``, the legacy
storage classes (``FloatStorage``...) in ``legacy_storage.py``, and the names
that cannot apply to an emulated device in ``parity.py``.
"""

import os
import threading
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .. import _C
from .errors import DeferredEmuCallError

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
    "can_device_access_peer",
    "get_arch_list",
    "is_tf32_supported",
    "default_generators",
    "has_half",
    "has_magma",
]

# Filled when emu starts (torch.cuda.default_generators is too): the default
# generator of each device, what torch.manual_seed seeds.
default_generators: tuple[torch.Generator, ...] = ()
# Half precision works (CPU kernels); MAGMA is a CUDA library emu does not use.
has_half: bool = True
has_magma: bool = False

# LITERALINCLUDE START: LAZY_INIT
_initialized = False
_in_bad_fork = False
_init_lock = threading.Lock()
# Calls made before first use (torch.manual_seed...), by key: a repeated call
# replaces the earlier one, so seeding in a loop does not pile them up. Each
# keeps the stack it was made from, for the error if it fails at init.
_queued_calls: dict[str, tuple[Callable[[], None], list[str]]] = {}


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
        _queued_calls[key] = (call, traceback.format_stack())


def _lazy_init() -> None:
    """Starts the runtime at first real use (PyTorch calls this too, before it
    creates the first emu tensor)."""
    global _initialized, default_generators
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
        default_generators = tuple(_C._default_generator(i) for i in range(_C._device_count()))
        # Before _initialized: a bad TORCH_EMU_FAULTS then fails every use alike,
        # and the queued calls (torch.manual_seed...) wait for one that succeeds.
        faults._arm_from_environment(_C._device_count())
        from ..compile.cache_key import tag_compile_caches

        tag_compile_caches()  # before any emu graph can be compiled, and only in programs that use emu
        _initialized = True
        calls = list(_queued_calls.values())
        _queued_calls.clear()
        for call, stack in calls:
            try:
                call()
            except Exception as e:
                raise DeferredEmuCallError(
                    f"emu call failed lazily at initialization with error: {e}\n\n"
                    f"emu call was originally invoked at:\n\n{''.join(stack)}"
                ) from e


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


def _initialized_device_index(device: Any, optional: bool = True) -> int:
    """Starts emu if needed and resolves ``device`` to an index (for the
    memory, stream, random and faults modules), checked against the device
    count; -1 stays the current device of the stream functions, as in CUDA."""
    _lazy_init()
    index = _get_device_index(device, optional)
    if index != -1:
        _C._check_device_index(index)
    return index


def _whole_number_problem(name: str, value: Any, low: int, high: int = 2**63 - 1) -> "str | None":
    """What is wrong with ``value`` as an int argument from ``low`` to ``high``
    (bools are not numbers here), if anything: arguments that reach C++ as
    fixed-size integers are checked with this first."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        bounds = {2**63 - 1: "2**63-1", -(2**63): "-2**63"}
        return (f"{name} must be a whole number from {bounds.get(low, low)} to {bounds.get(high, high)}, "
                f"got {value!r}")
    return None


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


def _sleep(cycles: int) -> None:
    """Keeps the current stream busy for ``cycles`` device clock cycles (the
    ``clock_rate`` property in kHz, 1 GHz if it is 0) and returns at once, as
    ``torch.cuda._sleep``: a slow kernel on purpose, for tests of stream
    order."""
    problem = _whole_number_problem("cycles", cycles, -(2**63))  # C++ refuses negatives
    if problem:
        raise ValueError(f"torch.emu._sleep: {problem}")
    _lazy_init()
    _C._sleep(cycles)


@dataclass(frozen=True)
class _EmuDeviceProperties:
    """The fields of torch.cuda's device properties. Multiprocessors are the
    host threads a kernel may use and memory is host memory, so the hardware
    figures are the host's or the documented constants of the runtime's
    emu_runtime_attributes.h (e.g. warp_size 1, no shared memory)."""

    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int
    is_integrated: int
    is_multi_gpu_board: int
    max_threads_per_multi_processor: int
    warp_size: int
    L2_cache_size: int
    clock_rate: int
    memory_clock_rate: int
    memory_bus_width: int
    shared_memory_per_block: int
    shared_memory_per_multiprocessor: int
    uuid: str
    gcnArchName: str = "emu does not have a GCN arch name"

    def __repr__(self) -> str:
        return (
            f"_EmuDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid}, "
            f"L2_cache_size={self.L2_cache_size // (1024 * 1024)}MB)"
        )


def get_device_properties(device: Any = None) -> _EmuDeviceProperties:
    _lazy_init()
    index = _get_device_index(device)
    return _EmuDeviceProperties(**_C._get_device_properties(index), **_C._device_attributes(index))


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    props = get_device_properties(device)
    return props.major, props.minor


# LITERALINCLUDE START: PEER_AND_ARCH
def can_device_access_peer(device: Any, peer_device: Any) -> bool:
    """Whether kernels on ``device`` can access ``peer_device``'s memory: emu
    devices all live in the host's memory, so any two distinct devices can.
    Like torch.cuda, a device with itself is False, and a bad index raises."""
    _lazy_init()
    device = _get_device_index(device, optional=True)
    peer_device = _get_device_index(peer_device)
    count = device_count()
    if not 0 <= device < count:
        raise AssertionError(f"Invalid device id emu:{device}: there are {count} emu devices")
    if not 0 <= peer_device < count:
        raise AssertionError(f"Invalid peer device id emu:{peer_device}: there are {count} emu devices")
    return device != peer_device


def get_arch_list() -> list[str]:
    """The device architectures this build's kernels run on, named like CUDA's
    ``sm_XY`` from the compute capability: emu kernels are host code, so one
    build serves the one emulated architecture, ``emu_<major><minor>``."""
    if not is_available():
        return []
    props = _C._get_device_properties(0)  # reads the configuration only: no init, fork stays safe
    return [f"emu_{props['major']}{props['minor']}"]


def is_tf32_supported() -> bool:
    """False: emu's float32 matmuls and convolutions run PyTorch's CPU kernels
    in full float32; there is no TF32 math mode to switch to."""
    return False
# LITERALINCLUDE END: PEER_AND_ARCH


from . import graphs, memory, random, streams  # noqa: E402
from .graphs import *  # noqa: E402,F401,F403
from .memory import *  # noqa: E402,F401,F403
from .random import *  # noqa: E402,F401,F403
from .streams import *  # noqa: E402,F401,F403

__all__ += graphs.__all__ + memory.__all__ + random.__all__ + streams.__all__

from . import comm, errors, faults, legacy_storage, monitor, parity  # noqa: E402
from .errors import *  # noqa: E402,F401,F403
from .legacy_storage import *  # noqa: E402,F401,F403
from .monitor import *  # noqa: E402,F401,F403
from .parity import *  # noqa: E402,F401,F403

__all__ += errors.__all__ + legacy_storage.__all__ + monitor.__all__ + parity.__all__

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

# Sharing emu tensors through torch.multiprocessing (importing it registers the
# emu storage reducer).
from ..ipc import ipc_collect  # noqa: E402

__all__ += ["ipc_collect"]
