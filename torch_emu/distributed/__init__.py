"""Distributed support for emu: the ``emu_gloo`` c10d backend.

``import torch`` (autoload) registers the backend through :func:`register`,
which costs a few dictionary entries: the process group code in
``torch_emu.distributed.backend`` is imported only when c10d first creates an
``emu_gloo`` group. After registration ``init_process_group`` accepts
``backend="emu_gloo"`` (emu tensors only) or ``backend="cpu:gloo,emu:emu_gloo"``
(CPU and emu tensors), and ``backend=None`` (or ``device_id=torch.device("emu",
i)``) picks ``emu_gloo`` for emu.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["BACKEND_NAME", "EmuGlooProcessGroup", "create_emu_gloo_process_group", "is_available", "register"]

BACKEND_NAME = "emu_gloo"


def is_available() -> bool:
    """Whether the emu_gloo backend can be used (PyTorch built with Gloo)."""
    return torch.distributed.is_available() and torch.distributed.is_gloo_available()


# LITERALINCLUDE START: DIST_REGISTER
def _create_lazily(store, rank: int, size: int, timeout):
    """The creator c10d calls; the process group code loads on first use."""
    from .backend import create_emu_gloo_process_group

    return create_emu_gloo_process_group(store, rank, size, timeout)


def register() -> None:
    """Makes ``emu_gloo`` the c10d backend of the ``emu`` device (idempotent).

    Called by ``import torch`` through the autoload of torch_emu. c10d itself
    is already imported by then (``import torch`` imports torch.distributed),
    so this only adds the backend's entries to ``dist.Backend``'s tables.
    """
    if not is_available():
        return
    from torch.distributed import Backend

    if BACKEND_NAME not in Backend.backend_list:
        Backend.register_backend(BACKEND_NAME, _create_lazily, extended_api=False, devices=["emu"])
# LITERALINCLUDE END: DIST_REGISTER


def __getattr__(name: str) -> Any:
    # EmuGlooProcessGroup and create_emu_gloo_process_group load the backend
    # module on first access, keeping the import of this package cheap.
    if name in ("EmuGlooProcessGroup", "create_emu_gloo_process_group"):
        from . import backend

        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
