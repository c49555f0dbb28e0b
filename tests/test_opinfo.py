"""PyTorch's OpInfo database run on emu and compared with CPU.

Every OpInfo's sample inputs are generated on CPU, copied to emu, and the op
is run on both; the emu result must match the CPU one (emu runs the CPU
kernels on device memory, so results should be equal), and tensor results
must live on emu.

Backward: the gradients of the (summed) float32 outputs with respect to the
inputs must match CPU's too.

The default run is a CI-sized, deterministic subset: forward on every
``STRIDE``-th OpInfo (by sorted name), float32 and int64; backward on every
``BACKWARD_STRIDE``-th OpInfo that supports autograd; the first ``SAMPLES``
samples each.  ``TORCH_EMU_OPINFO_FULL=1`` runs every OpInfo, all samples,
bfloat16 too, and backward on all of them.

Known mismatches live in ``parity_known_failures.OPINFO_FAILURES``.
"""

import itertools
import os
import sys
import types

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from parity_known_failures import OPINFO_FAILURES, marks_for  # noqa: E402

FULL = os.environ.get("TORCH_EMU_OPINFO_FULL", "") not in ("", "0")
# LITERALINCLUDE START: OPINFO_SAMPLING
STRIDE = 6  # default forward: every 6th OpInfo by sorted name (~17% of op_db)
BACKWARD_STRIDE = 2  # default backward: every 2nd OpInfo with autograd (half)
# LITERALINCLUDE END: OPINFO_SAMPLING
SAMPLES = None if FULL else 2
DTYPES = [torch.float32, torch.int64] + ([torch.bfloat16] if FULL else [])

# Ops whose outputs are random or uninitialized: only shapes/dtypes compared.
RANDOM_OPS = {
    "bernoulli",
    "cauchy",
    "exponential",
    "geometric",
    "log_normal",
    "multinomial",
    "normal",
    "uniform",
    "rand_like",
    "randn_like",
    "randint_like",
    "randint",
    "randn",
    "nn.functional.alpha_dropout",
    "nn.functional.dropout",
    "nn.functional.dropout2d",
    "nn.functional.dropout3d",
    "nn.functional.feature_alpha_dropout",
    "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d",
    "nn.functional.rrelu",
    "svd_lowrank",
    "pca_lowrank",
}


# Ops that need some tensor arguments to stay on CPU (not an emu issue).
CPU_ARG_OPS = {"tensor_split"}  # tensor_indices_or_sections must be a CPU tensor


def _op_id(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _shape_only(op):
    return op.name in RANDOM_OPS or getattr(op, "has_nondeterministic_output", False)


_ALL_OPS = sorted(op_db, key=_op_id)
_OPS = _ALL_OPS if FULL else _ALL_OPS[::STRIDE]
_GRAD_OPS = [op for op in _ALL_OPS if op.supports_autograd]
if not FULL:
    _GRAD_OPS = _GRAD_OPS[::BACKWARD_STRIDE]


def _params():
    for op in _OPS:
        oid = _op_id(op)
        for dtype in DTYPES:
            tid = f"{oid}-{str(dtype).split('.')[-1]}"
            yield pytest.param(op, dtype, id=tid, marks=marks_for(OPINFO_FAILURES, tid, oid))


def _backward_params():
    for op in _GRAD_OPS:
        oid = _op_id(op)
        tid = f"{oid}-backward"
        yield pytest.param(op, id=tid, marks=marks_for(OPINFO_FAILURES, tid, oid))


def _to_emu(x):
    if isinstance(x, torch.Tensor):
        y = _copy_storage_view(x) if _is_partial_view(x) else x.detach().to("emu")
        if x.requires_grad:
            y.requires_grad_(True)
        return y
    return x


def _is_partial_view(x):
    # A view into a larger storage (e.g. ``base[5:15]``): ops such as
    # as_strided address the whole storage, so copy all of it, not the view.
    return (
        x.layout == torch.strided
        and not x.is_conj()
        and not x.is_neg()
        and (x.storage_offset() != 0 or x.untyped_storage().nbytes() != x.numel() * x.element_size())
    )


def _copy_storage_view(x):
    n = x.untyped_storage().nbytes() // x.element_size()
    flat = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage(), 0, (n,), (1,))
    return flat.to("emu").as_strided(x.shape, x.stride(), x.storage_offset())


def _emu_kwargs(kwargs):
    kwargs = tree_map(_to_emu, kwargs)
    dev = kwargs.get("device")
    if dev is not None and torch.device(dev).type == "cpu":
        kwargs["device"] = "emu"  # factory-style ops: build on emu instead
    return kwargs


def _to_cpu(x):
    return x.detach().cpu() if isinstance(x, torch.Tensor) else x


def _is_cpu_device(a):
    return (isinstance(a, torch.device) and a.type == "cpu") or (isinstance(a, str) and a == "cpu")


def _check_on_emu(out):
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor):
            assert t.device.type == "emu", f"emu op returned a tensor on {t.device}"


def _compare(emu_out, cpu_out, shape_only):
    emu_leaves, emu_spec = tree_flatten(emu_out)
    emu_leaves = [_to_cpu(e) for e in emu_leaves]
    cpu_leaves, cpu_spec = tree_flatten(cpu_out)
    assert emu_spec == cpu_spec, f"output structure differs: {emu_spec} vs {cpu_spec}"
    for e, c in zip(emu_leaves, cpu_leaves):
        if isinstance(c, torch.Tensor):
            assert isinstance(e, torch.Tensor), f"expected a tensor, got {type(e)}"
            if shape_only:
                assert (e.shape, e.dtype) == (c.shape, c.dtype)
            else:
                torch.testing.assert_close(e, c, equal_nan=True, check_device=False)
        elif not shape_only:
            if isinstance(c, float) and c != c:
                assert e != e
            else:
                assert e == c, f"{e!r} != {c!r}"


def _grad_leaves(sample):
    return [t for t in tree_flatten(sample.input)[0] if isinstance(t, torch.Tensor) and t.requires_grad]


def _sum_outputs(out):
    tensors = [
        t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()
    ]
    return sum(t.sum() for t in tensors) if tensors else None


def _run_forward(op, dtype):
    torch.manual_seed(0)
    samples = itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=False), SAMPLES)
    shape_only = _shape_only(op)
    ran = 0
    for i, sample in enumerate(samples):
        e_input = tree_map(_to_emu, sample.input)
        e_args = sample.args if op.name in CPU_ARG_OPS else tree_map(_to_emu, sample.args)
        e_kwargs = _emu_kwargs(sample.kwargs)
        try:
            cpu_out = op(sample.input, *sample.args, **sample.kwargs)
        except Exception as cpu_exc:
            with pytest.raises(Exception):
                op(e_input, *e_args, **e_kwargs)
            continue
        try:
            emu_out = op(e_input, *e_args, **e_kwargs)
            on_emu = any(
                isinstance(t, torch.Tensor) and t.device.type == "emu"
                for t in tree_flatten((e_input, e_args, e_kwargs))[0]
            ) or e_kwargs.get("device") == "emu"
            to_cpu = any(_is_cpu_device(a) for a in tree_flatten(e_args)[0])  # e.g. x.to("cpu")
            if on_emu and not to_cpu:  # pure factory calls without a device stay on CPU
                _check_on_emu(emu_out)
            _compare(emu_out, cpu_out, shape_only)
        except Exception as exc:
            raise AssertionError(f"sample {i} ({sample.summary() if hasattr(sample, 'summary') else sample}): {exc}") from exc
        ran += 1
    return ran


def _run_backward(op, dtype):
    torch.manual_seed(0)
    samples = itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=True), SAMPLES)
    for i, sample in enumerate(samples):
        cpu_leaves = _grad_leaves(sample)
        if not cpu_leaves:
            continue
        e_input = tree_map(_to_emu, sample.input)
        e_args = sample.args if op.name in CPU_ARG_OPS else tree_map(_to_emu, sample.args)
        e_kwargs = _emu_kwargs(sample.kwargs)
        emu_leaves = _grad_leaves(types.SimpleNamespace(input=e_input))
        try:
            cpu_loss = _sum_outputs(op(sample.input, *sample.args, **sample.kwargs))
            if cpu_loss is None:
                continue
            cpu_grads = torch.autograd.grad(cpu_loss, cpu_leaves, allow_unused=True)
        except Exception:
            continue  # backward unsupported on CPU for this sample
        try:
            emu_loss = _sum_outputs(op(e_input, *e_args, **e_kwargs))
            emu_grads = torch.autograd.grad(emu_loss, emu_leaves, allow_unused=True)
            for eg, cg in zip(emu_grads, cpu_grads):
                if cg is None:
                    assert eg is None
                    continue
                assert eg.device.type == "emu", f"grad on {eg.device}"
                if not _shape_only(op):
                    torch.testing.assert_close(eg.cpu(), cg, equal_nan=True, check_device=False)
        except Exception as exc:
            raise AssertionError(f"backward sample {i}: {exc}") from exc


@pytest.mark.parametrize("op,dtype", list(_params()))
def test_opinfo(op, dtype):
    if not op.supports_dtype(dtype, "cpu"):
        pytest.skip(f"{dtype} not supported on CPU")
    _run_forward(op, dtype)


@pytest.mark.parametrize("op", list(_backward_params()))
def test_opinfo_backward(op):
    if not op.supports_dtype(torch.float32, "cpu"):
        pytest.skip("float32 not supported on CPU")
    _run_backward(op, torch.float32)
