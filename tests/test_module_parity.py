"""PyTorch's ModuleInfo database (``module_db``) run on emu and compared with CPU.

For every ModuleInfo, in train and in eval mode, each of its module inputs
(from ``module_inputs_func``, made on CPU with ``requires_grad=True``) builds
the module on CPU; a deep copy moved with ``module.to("emu")`` has the same
parameters and buffers.  Both run forward on the same inputs with the same
seed (so Dropout, RReLU, FractionalMaxPool draw the same numbers: emu's
generator matches CPU's), then backward with the same random output gradient.
Outputs, input gradients, parameter gradients and buffers (e.g. BatchNorm's
running statistics) must match CPU's and live on emu.

The default run is every module in both modes, float32 and float64, with at
most ``MAX_INPUTS`` of its module inputs (evenly spread over the list:
nn.Transformer has 64, each a whole model).  ``TORCH_EMU_MODULE_FULL=1`` runs
every module input.  Known mismatches live in ``parity_known_failures.MODULE_FAILURES``.
"""

import copy
import os
import sys

import pytest
import torch
from torch.testing._internal.common_modules import module_db
from torch.utils._pytree import tree_flatten, tree_map

sys.path.insert(0, os.path.dirname(__file__))
from parity_known_failures import MODULE_FAILURES, marks_for  # noqa: E402

FULL = os.environ.get("TORCH_EMU_MODULE_FULL", "") not in ("", "0")
DTYPES = [torch.float32, torch.float64]
MAX_INPUTS = None if FULL else 4
SEED = 1234


def _params():
    for info in sorted(module_db, key=lambda i: i.name):
        for dtype in DTYPES:
            for training in (True, False):
                tid = f"{info.name}-{str(dtype).split('.')[-1]}-{'train' if training else 'eval'}"
                marks = marks_for(MODULE_FAILURES, tid, info.name)
                yield pytest.param(info, dtype, training, id=tid, marks=marks)


def _copy(tree, device):
    """Fresh leaf copies of the tensors in ``tree`` on ``device``: gradients
    start from none (module inputs may share tensors), and a tensor passed
    twice stays one tensor (KLDivLoss' scalar input is input and target)."""
    copies = {}

    def one(x):
        if not isinstance(x, torch.Tensor):
            return copy.deepcopy(x)
        if id(x) not in copies:
            copies[id(x)] = x.detach().to(device, copy=True).requires_grad_(x.requires_grad)
        return copies[id(x)]

    return tree_map(one, tree)


def _tensors(tree):
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _assert_same(emu, cpu, what):
    emu_leaves, emu_spec = tree_flatten(emu)
    cpu_leaves, cpu_spec = tree_flatten(cpu)
    assert emu_spec == cpu_spec, f"{what}: structure differs: {emu_spec} vs {cpu_spec}"
    for i, (e, c) in enumerate(zip(emu_leaves, cpu_leaves)):
        if isinstance(c, torch.Tensor):
            assert isinstance(e, torch.Tensor) and e.device.type == "emu", f"{what}[{i}]: {type(e)} not on emu"
            torch.testing.assert_close(e.cpu(), c, equal_nan=True, msg=lambda m: f"{what}[{i}]: {m}")
        else:
            assert e == c, f"{what}[{i}]: {e!r} != {c!r}"


def _grads(tensors):
    return [t.grad for t in tensors if t.requires_grad]


# LITERALINCLUDE START: MODULE_FORWARD_BACKWARD
def _forward_backward(module, args, kwargs, leaves, grad_seed):
    # Seeds CPU's and emu's generators alike: Dropout, RReLU and
    # FractionalMaxPool draw the same numbers on both devices.
    torch.manual_seed(SEED)
    out = module(*args, **kwargs)
    outs = [t for t in _tensors(out) if t.requires_grad and t.is_floating_point()]
    if outs:
        # The same random output gradient on both devices, drawn on CPU.
        gen = torch.Generator().manual_seed(grad_seed)
        grads = [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for o in outs]
        torch.autograd.backward(outs, grads)
    return out, _grads(leaves)
# LITERALINCLUDE END: MODULE_FORWARD_BACKWARD


def _run(info, module_input, dtype, training):
    ctor, fwd = module_input.constructor_input, module_input.forward_input
    if fwd is None:
        return False
    torch.manual_seed(SEED)
    cpu_mod = info.module_cls(*ctor.args, **ctor.kwargs).to(dtype)
    cpu_mod.train(training)
    cpu_args, cpu_kwargs = _copy((fwd.args, fwd.kwargs), "cpu")
    if info.is_lazy:  # parameters exist only after a first forward
        with torch.no_grad():
            cpu_mod(*cpu_args, **cpu_kwargs)
    emu_mod = copy.deepcopy(cpu_mod).to("emu")
    emu_args, emu_kwargs = _copy((cpu_args, cpu_kwargs), "emu")

    cpu_leaves = _tensors((cpu_args, cpu_kwargs)) + list(cpu_mod.parameters())
    emu_leaves = _tensors((emu_args, emu_kwargs)) + list(emu_mod.parameters())
    try:
        cpu_out, cpu_grads = _forward_backward(cpu_mod, cpu_args, cpu_kwargs, cpu_leaves, SEED + 1)
    except Exception:
        # CPU rejects this input: emu must reject it too.
        with pytest.raises(Exception):
            _forward_backward(emu_mod, emu_args, emu_kwargs, emu_leaves, SEED + 1)
        return False
    emu_out, emu_grads = _forward_backward(emu_mod, emu_args, emu_kwargs, emu_leaves, SEED + 1)
    _assert_same(emu_out, cpu_out, "output")
    _assert_same(emu_grads, cpu_grads, "gradient")
    _assert_same(list(emu_mod.buffers()), list(cpu_mod.buffers()), "buffer")
    return True


@pytest.mark.parametrize("info,dtype,training", list(_params()))
def test_module(info, dtype, training, baseline_memory):
    if dtype not in info.supported_dtypes("cpu"):
        pytest.skip(f"{dtype} not supported on CPU")
    torch.manual_seed(SEED)  # the inputs do not depend on the tests run before
    inputs = info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=True, training=training)
    if MAX_INPUTS and len(inputs) > MAX_INPUTS:
        inputs = inputs[:: -(-len(inputs) // MAX_INPUTS)]
    ran = 0
    for i, module_input in enumerate(inputs):
        error = None
        try:
            ran += _run(info, module_input, dtype, training)
        except Exception as exc:
            error = f"module input {i} ({module_input.desc or 'default'}): {type(exc).__name__}: {exc}"
        # Raised outside the except block: the caught exception's frames hold
        # emu tensors, which must be freed before the leak check.
        if error:
            raise AssertionError(error)
    if not ran:
        pytest.skip("no module input runs on CPU")


def test_module_and_input_on_different_devices(baseline_memory):
    module = torch.nn.Linear(4, 3).to("emu")
    with pytest.raises(RuntimeError, match="same device"):
        module(torch.randn(2, 4))
    with pytest.raises(RuntimeError, match="same device"):
        torch.nn.Linear(4, 3)(torch.randn(2, 4, device="emu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_equals_cpu_bit_for_bit(dtype, approximate, baseline_memory):
    # CPU's gelu takes oneDNN for CPU float32/bfloat16 tensors; emu's kernel
    # must take the same path, or TransformerEncoderLayer's gradients drift.
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(1000, generator=gen) * 3).to(dtype)
    grad = torch.randn(1000, generator=gen).to(dtype)
    emu_x = x.to("emu")
    assert torch.equal(torch.nn.functional.gelu(emu_x, approximate=approximate).cpu(),
                       torch.nn.functional.gelu(x, approximate=approximate))
    assert torch.equal(torch.ops.aten.gelu_backward(grad.to("emu"), emu_x, approximate=approximate).cpu(),
                       torch.ops.aten.gelu_backward(grad, x, approximate=approximate))
    strided = x.view(40, 25).t()  # not contiguous: ATen's kernel on CPU too
    emu_strided = strided.to("emu")
    assert emu_strided.stride() == strided.stride()
    assert torch.equal(torch.nn.functional.gelu(emu_strided, approximate=approximate).cpu(),
                       torch.nn.functional.gelu(strided, approximate=approximate))
    torch.ops.aten.gelu_(emu_x, approximate=approximate)
    assert torch.equal(emu_x.cpu(), torch.nn.functional.gelu(x, approximate=approximate))
    with pytest.raises(RuntimeError, match="same device"):
        torch.ops.aten.gelu_backward(grad, emu_x, approximate=approximate)
