"""Scenario 1 in Python: a Python kernel for a built-in aten operator on emu.

A Python kernel costs a trip through the interpreter on every call and holds
the GIL, so it is a way to prototype an emu kernel, not to ship one. This one
is therefore registered only inside :func:`prototype_kernels`; without it,
``aten::trace`` on emu runs CPU's kernel through the global fallback.
"""

import contextlib
from collections.abc import Iterator

import torch

# LITERALINCLUDE START: PY_NATIVE_KERNEL
def trace_emu(x: torch.Tensor) -> torch.Tensor:
    # A Python kernel is written with other operators, which run on emu as
    # usual: diagonal() is a view (no kernel), sum() is one kernel launch.
    # The dispatcher calls it below autograd, so these calls are not recorded.
    return x.diagonal().sum()


@contextlib.contextmanager
def prototype_kernels() -> Iterator[torch.library.Library]:
    """Registers the Python emu kernels while the ``with`` block runs."""
    lib = torch.library.Library("aten", "IMPL")  # adds kernels to existing aten ops
    lib.impl("trace", trace_emu, "PrivateUse1")
    try:
        yield lib
    finally:
        lib._destroy()  # removes the registrations again
# LITERALINCLUDE END: PY_NATIVE_KERNEL
