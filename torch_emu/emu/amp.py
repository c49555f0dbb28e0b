"""``torch.emu.amp``: automatic mixed precision on emu, like ``torch.cuda.amp``.

What PyTorch itself asks of the device module is one function,
``get_amp_supported_dtype()``: ``torch.autocast("emu", dtype=...)`` checks the
requested dtype against it. The op policies are C++ (AutocastPrivateUse1
kernels, ``csrc/aten/EmuAutocast.cpp``) and GradScaler's two device kernels
are native emu kernels (``csrc/aten/kernels/EmuAmpKernels.cpp``). The rest mirrors
``torch.cuda``: per-device-type autocast state accessors and
``torch.emu.amp.autocast`` / ``torch.emu.amp.GradScaler`` shortcuts.
"""

from typing import Any

import torch

__all__ = [
    "autocast",
    "custom_fwd",
    "custom_bwd",
    "GradScaler",
    "get_amp_supported_dtype",
    "is_autocast_enabled",
    "set_autocast_enabled",
    "get_autocast_dtype",
    "set_autocast_dtype",
    "is_bf16_supported",
]

_DEVICE_TYPE = "emu"


# LITERALINCLUDE START: AMP_MODULE_FUNCTIONS
def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes ``torch.autocast("emu", dtype=...)`` accepts."""
    return [torch.float16, torch.bfloat16]


def _check_amp_dtype(dtype: Any) -> None:
    supported = get_amp_supported_dtype()
    if dtype not in supported:
        raise ValueError(
            f"emu autocast supports the dtypes {', '.join(map(str, supported))}, got {dtype!r}. "
            "Autocast runs selected ops in a lower-precision floating-point type; use float16 (with "
            "torch.amp.GradScaler('emu')) or bfloat16."
        )


def is_autocast_enabled() -> bool:
    """Whether emu autocast is enabled on this thread."""
    return torch.is_autocast_enabled(_DEVICE_TYPE)


def set_autocast_enabled(enabled: bool) -> None:
    """Enables or disables emu autocast on this thread (prefer the context
    manager, which restores the previous state)."""
    torch.set_autocast_enabled(_DEVICE_TYPE, bool(enabled))


def get_autocast_dtype() -> torch.dtype:
    """The lower-precision dtype emu autocast uses (default float16)."""
    return torch.get_autocast_dtype(_DEVICE_TYPE)


def set_autocast_dtype(dtype: torch.dtype) -> None:
    """Sets the dtype emu autocast uses; raises ValueError for a dtype not in
    :func:`get_amp_supported_dtype`."""
    _check_amp_dtype(dtype)
    torch.set_autocast_dtype(_DEVICE_TYPE, dtype)
# LITERALINCLUDE END: AMP_MODULE_FUNCTIONS


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Emu runs bfloat16 (CPU kernels), so always True."""
    return True


# LITERALINCLUDE START: AMP_AUTOCAST_CLASS
class autocast(torch.amp.autocast_mode.autocast):
    """``torch.autocast("emu", ...)`` with the signature of
    ``torch.cuda.amp.autocast``. Unlike ``torch.autocast``, which warns and
    disables itself for a dtype the backend does not support, this raises."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True):
        if enabled:
            _check_amp_dtype(dtype)
        super().__init__(_DEVICE_TYPE, enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)
# LITERALINCLUDE END: AMP_AUTOCAST_CLASS


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("emu", ...)``."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        super().__init__(
            _DEVICE_TYPE,
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )


def custom_fwd(fwd=None, *, cast_inputs: torch.dtype | None = None):
    """``torch.amp.custom_fwd`` for emu (see ``torch.cuda.amp.custom_fwd``)."""
    return torch.amp.custom_fwd(fwd, device_type=_DEVICE_TYPE, cast_inputs=cast_inputs)


def custom_bwd(bwd=None):
    """``torch.amp.custom_bwd`` for emu (see ``torch.cuda.amp.custom_bwd``)."""
    return torch.amp.custom_bwd(bwd, device_type=_DEVICE_TYPE)
