"""Random number state of ``torch.emu``. Each device has a default generator
that draws exactly the numbers CPU's would for the same seed."""

from typing import Any, Iterable

import torch

from .. import _C

__all__ = [
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
    "get_rng_state",
    "get_rng_state_all",
    "set_rng_state",
    "set_rng_state_all",
]


def _generator(device: Any = None) -> torch.Generator:
    from . import _initialized_device_index

    return _C._default_generator(_initialized_device_index(device))


def _device_indices() -> range:
    from . import device_count

    return range(device_count())


# LITERALINCLUDE START: PY_RANDOM
def manual_seed(seed: int) -> None:
    """Seeds the current device's generator (deferred until emu is used)."""
    seed = int(seed)
    from . import _lazy_call, current_device

    _lazy_call("manual_seed", lambda: _generator(current_device()).manual_seed(seed))


def manual_seed_all(seed: int) -> None:
    """Seeds every device's generator; ``torch.manual_seed`` calls this."""
    seed = int(seed)
    from . import _lazy_call

    _lazy_call("manual_seed_all", lambda: [_generator(i).manual_seed(seed) for i in _device_indices()])
# LITERALINCLUDE END: PY_RANDOM


def seed() -> None:
    """Seeds the current device's generator with a random number (deferred
    until emu is used)."""
    from . import _lazy_call

    _lazy_call("seed", lambda: _generator().seed())


def seed_all() -> None:
    """Seeds every device with one random number (deferred until emu is used)."""
    from . import _lazy_call

    def seed_every_device() -> None:
        random_seed = _generator(0).seed()
        for i in _device_indices():
            _generator(i).manual_seed(random_seed)

    _lazy_call("seed_all", seed_every_device)


def initial_seed() -> int:
    """The seed the current device's generator was last seeded with."""
    return _generator().initial_seed()


def get_rng_state(device: Any = "emu") -> torch.Tensor:
    """The generator state of ``device`` as a ByteTensor (CPU's format)."""
    return _generator(device).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in _device_indices()]


def set_rng_state(new_state: torch.Tensor, device: Any = "emu") -> None:
    """Restores a state from :func:`get_rng_state`."""
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError("set_rng_state expects a torch.ByteTensor from get_rng_state")
    _generator(device).set_state(new_state.cpu())


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
