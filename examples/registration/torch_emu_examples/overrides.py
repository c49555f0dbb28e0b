"""Scenario 6 in Python: a fallthrough registration and a
CompositeImplicitAutograd operator overridden with an emu kernel. (The meta
registration is ``register_fake`` in :mod:`.custom_ops`.)
"""

import contextlib
from collections.abc import Iterator

import torch

# LITERALINCLUDE START: PY_FALLTHROUGH
emu_py_lib = torch.library.Library("emu_py", "FRAGMENT")
emu_py_lib.define("round_to_grid(Tensor x, float step) -> Tensor")


def _round_to_grid(x: torch.Tensor, step: float) -> torch.Tensor:
    # Reached through the fallthrough, this kernel runs with autograd still
    # on: without no_grad, round and mul would be recorded for CPU inputs.
    with torch.no_grad():
        return torch.round(x / step) * step


emu_py_lib.impl("round_to_grid", _round_to_grid, "CompositeExplicitAutograd")
# Not differentiable: autograd skips the op (its output is a constant) instead
# of running PyTorch's autograd fallback, which would warn in backward.
emu_py_lib.impl("round_to_grid", torch.library.fallthrough_kernel, "AutogradPrivateUse1")
emu_py_lib.impl("round_to_grid", torch.library.fallthrough_kernel, "AutogradCPU")
# LITERALINCLUDE END: PY_FALLTHROUGH

# LITERALINCLUDE START: PY_OVERRIDE_COMPOSITE
def _relu6_emu(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(0, 6)  # one kernel instead of hardtanh's decomposition


def _relu6_autograd(x: torch.Tensor) -> torch.Tensor:
    if torch.is_grad_enabled() and x.requires_grad:
        return torch.ops.aten.hardtanh(x, 0.0, 6.0)  # differentiable, as on CPU
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.aten.relu6(x)  # the emu kernel above


@contextlib.contextmanager
def relu6_override() -> Iterator[torch.library.Library]:
    """aten::relu6 (CompositeImplicitAutograd) with an emu kernel and the
    autograd kernel it then needs, while the ``with`` block runs."""
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("relu6", _relu6_emu, "PrivateUse1")
    lib.impl("relu6", _relu6_autograd, "AutogradPrivateUse1")
    try:
        yield lib
    finally:
        lib._destroy()
# LITERALINCLUDE END: PY_OVERRIDE_COMPOSITE
