"""``torch.tpldev``: the device module (what ``torch.cuda`` is for CUDA).

torch.get_device_module("tpldev"), torch.manual_seed, torch.random.fork_rng and
torch.accelerator find the backend's Python functions here. The memory
functions read the allocator through torch.accelerator, the one place its
statistics come from.
Guide: torch-emu docs/guide/python_frontend.md
"""

from typing import Any

import torch

from . import _C

_Device = torch.device | str | int | None


# LITERALINCLUDE START: DEVICES
def is_available() -> bool:
    return _C.device_count() > 0


def device_count() -> int:
    return _C.device_count()


def current_device() -> int:
    return _C.current_device()


def _index(device: _Device) -> int:
    """The device index of ``device``: an int, "tpldev:1", a torch.device, or None for the current device."""
    if device is None:
        return current_device()
    if isinstance(device, (str, torch.device)):
        device = torch.device(device)
        if device.type != "tpldev":
            raise ValueError(f"expected a tpldev device, got {device}")
        return current_device() if device.index is None else device.index
    return int(device)


def set_device(device: _Device) -> None:
    _C.set_device(_index(device))


class device:
    """Context manager that makes ``device`` current and restores the previous device on exit."""

    def __init__(self, device: Any):
        self.index = _index(device)
        self.previous = -1

    def __enter__(self):
        self.previous = current_device()
        _C.set_device(self.index)

    def __exit__(self, *exc):
        _C.set_device(self.previous)
        return False


def synchronize(device: _Device = None) -> None:
    """Waits for the device's work (each call of this device completes before it returns)."""
    _C.synchronize(_index(device))
# LITERALINCLUDE END: DEVICES


# LITERALINCLUDE START: RNG
def _is_in_bad_fork() -> bool:
    """torch.manual_seed asks this: the driver is plain host memory, usable after fork()."""
    return False


def _generator(device: _Device) -> torch.Generator:
    return _C.default_generator(_index(device))


default_generators: tuple[torch.Generator, ...] = tuple(_C.default_generator(i) for i in range(device_count()))


def manual_seed(seed: int) -> None:
    _generator(None).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for g in default_generators:
        g.manual_seed(int(seed))


def seed() -> None:
    _generator(None).seed()


def seed_all() -> None:
    for g in default_generators:
        g.seed()


def initial_seed() -> int:
    return _generator(None).initial_seed()


def get_rng_state(device: _Device = "tpldev") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _Device = "tpldev") -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [g.get_state() for g in default_generators]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for g, state in zip(default_generators, new_states):
        g.set_state(state)
# LITERALINCLUDE END: RNG


# LITERALINCLUDE START: MEMORY
def memory_stats(device: _Device = None) -> dict[str, Any]:
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device: _Device = None) -> int:
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: _Device = None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: _Device = None) -> int:
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: _Device = None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device: _Device = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def mem_get_info(device: _Device = None) -> tuple[int, int]:
    """(free, total) bytes of the device, as the driver counts them (cached blocks are not free)."""
    return torch.accelerator.get_memory_info(_index(device))


def empty_cache() -> None:
    torch.accelerator.empty_cache()
# LITERALINCLUDE END: MEMORY
