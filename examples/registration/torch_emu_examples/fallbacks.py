"""Scenario 5 in Python: a per-operator copying CPU fallback and a per-operator
opt-out, both as Python kernels for PrivateUse1. Like every Python kernel for
an aten operator they are prototypes, registered only inside
:func:`per_op_fallbacks`.
"""

import contextlib
from collections.abc import Iterator, Sequence

import torch
from torch.utils._pytree import tree_map

# LITERALINCLUDE START: PY_PER_OP_FALLBACK
def copying_cpu_fallback(op):
    """A kernel that copies emu inputs to the host, runs ``op`` on CPU and
    copies the results back: at::native::cpu_fallback in Python. For
    functional operators only (a mutated input would need copying back)."""

    def kernel(*args, **kwargs):
        devices = {a.device for a in torch.utils._pytree.tree_leaves((args, kwargs))
                   if isinstance(a, torch.Tensor) and a.device.type == "emu"}
        (device,) = devices or {torch.device("emu", torch.emu.current_device())}
        to_cpu = lambda a: a.cpu() if isinstance(a, torch.Tensor) else a  # noqa: E731
        out = op(*tree_map(to_cpu, args), **tree_map(to_cpu, kwargs))
        return tree_map(lambda r: r.to(device) if isinstance(r, torch.Tensor) else r, out)

    return kernel


def not_implemented(name: str, why: str):
    def kernel(*args, **kwargs):
        raise NotImplementedError(f"{name} is not implemented for emu: {why}")

    return kernel


@contextlib.contextmanager
def per_op_fallbacks(cpu: Sequence[str] = ("bincount",),
                     refused: Sequence[str] = ("mkldnn_rnn_layer",)) -> Iterator[torch.library.Library]:
    lib = torch.library.Library("aten", "IMPL")
    for name in cpu:
        lib.impl(name, copying_cpu_fallback(getattr(torch.ops.aten, name)), "PrivateUse1")
    for name in refused:
        lib.impl(name, not_implemented(f"aten::{name}", "it is specific to mkldnn (oneDNN) on CPU"), "PrivateUse1")
    try:
        yield lib
    finally:
        lib._destroy()
# LITERALINCLUDE END: PY_PER_OP_FALLBACK
