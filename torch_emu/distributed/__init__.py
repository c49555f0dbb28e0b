"""Distributed support for emu: ``import torch_emu.distributed`` registers the
``emu_gloo`` c10d backend for the ``emu`` device.

Registration happens once, on import; after it, ``init_process_group`` accepts
``backend="emu_gloo"`` (emu tensors only) or ``backend="cpu:gloo,emu:emu_gloo"``
(CPU and emu tensors), and ``backend=None`` picks ``emu_gloo`` for emu.
"""

import torch.distributed as dist

from .backend import BACKEND_NAME, EmuGlooProcessGroup, create_emu_gloo_process_group

__all__ = ["BACKEND_NAME", "EmuGlooProcessGroup", "create_emu_gloo_process_group", "is_available"]


def is_available() -> bool:
    """Whether the emu_gloo backend can be used (PyTorch built with Gloo)."""
    return dist.is_available() and dist.is_gloo_available()


# LITERALINCLUDE START: DIST_REGISTER
if is_available() and BACKEND_NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND_NAME, create_emu_gloo_process_group, extended_api=False, devices=["emu"])
# LITERALINCLUDE END: DIST_REGISTER
