"""A sample of PyTorch's OpInfo database gives CPU's results on the device (every op with --full)."""

import itertools
import os

import torch
from torch.utils._pytree import tree_flatten, tree_map

TIER = "parity"
CHAPTER = "operators"
ORDER = 55
FULL = os.environ.get("TORCH_CONFORMANCE_FULL", "") not in ("", "0")  # set by --full
STRIDE = 1 if FULL else 4  # by default every 4th OpInfo by sorted name
SAMPLES = None if FULL else 2
# Outputs that are random or uninitialized: only shapes and dtypes can be compared.
RANDOM = ("bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal", "uniform",
          "rand", "dropout", "fractional_max_pool", "rrelu", "lowrank", "empty")
CPU_ARGS = ("tensor_split",)  # their index arguments must be CPU tensors, on any device


def ops():
    from torch.testing._internal.common_methods_invocations import op_db

    named = sorted(op_db, key=lambda op: (op.name, op.variant_test_name))
    return [op for op in named if torch.float32 in op.supported_dtypes("cpu")][::STRIDE]


def to_device(x, dev):
    if not isinstance(x, torch.Tensor):
        return x
    storage = x.untyped_storage() if x.layout == torch.strided else None
    if storage is not None and (x.storage_offset() or storage.nbytes() != x.numel() * x.element_size()):
        # A view into a larger storage: copy the whole storage, ops like as_strided address all of it.
        flat = torch.empty(0, dtype=x.dtype).set_(storage, 0, (storage.nbytes() // x.element_size(),))
        return flat.to(dev).as_strided(x.shape, x.stride(), x.storage_offset())
    return x.to(dev)


def is_random(op):
    return any(word in op.name for word in RANDOM) or getattr(op, "has_nondeterministic_output", False)


def move_sample(op, sample, dev):
    """The sample's input, args and kwargs on the device; leaves that need gradients keep needing them."""
    def move(t):
        moved = to_device(t, dev)
        return moved.detach().requires_grad_() if isinstance(t, torch.Tensor) and t.requires_grad else moved

    kwargs = tree_map(move, sample.kwargs)
    if isinstance(kwargs.get("device"), (str, torch.device)) and torch.device(kwargs["device"]).type == "cpu":
        kwargs["device"] = dev  # factory-style samples build on the device
    args = sample.args if op.name in CPU_ARGS else tree_map(move, sample.args)
    return tree_map(move, sample.input), args, kwargs


def compare(op, dev):
    """Compares the op's samples with CPU; returns how many were compared."""
    random = is_random(op)
    compared = 0
    for sample in itertools.islice(op.sample_inputs("cpu", torch.float32), SAMPLES):
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue  # CPU rejects this sample: nothing to compare
        inp, args, kwargs = move_sample(op, sample, dev)
        got = op(inp, *args, **kwargs)
        got_leaves, got_spec = tree_flatten(got)
        exp_leaves, exp_spec = tree_flatten(expected)
        assert got_spec == exp_spec, f"output structure {got_spec} != {exp_spec}"
        for g, e in zip(got_leaves, exp_leaves):
            if not isinstance(e, torch.Tensor):
                continue
            if random:
                assert (g.shape, g.dtype) == (e.shape, e.dtype)
            else:
                torch.testing.assert_close(g.cpu(), e, equal_nan=True)
        compared += 1
    return compared


def grad_leaves(inp):
    return [t for t in tree_flatten(inp)[0] if isinstance(t, torch.Tensor) and t.requires_grad]


def loss_of(out):
    tensors = [t for t in tree_flatten(out)[0]
               if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
    return sum(t.sum() for t in tensors) if tensors else None


def compare_backward(op, dev):
    """Compares the gradients of the op's samples (sum of its outputs) with CPU's; returns how many."""
    compared = 0
    for sample in itertools.islice(op.sample_inputs("cpu", torch.float32, requires_grad=True), SAMPLES):
        leaves = grad_leaves(sample.input)
        try:
            loss = loss_of(op(sample.input, *sample.args, **sample.kwargs))
            expected = torch.autograd.grad(loss, leaves, allow_unused=True) if loss is not None and leaves else None
        except Exception:
            continue  # no backward for this sample on CPU
        if expected is None:
            continue
        inp, args, kwargs = move_sample(op, sample, dev)
        got = torch.autograd.grad(loss_of(op(inp, *args, **kwargs)), grad_leaves(inp), allow_unused=True)
        for g, e in zip(got, expected):
            assert (g is None) == (e is None), "a gradient is missing on one side"
            if e is not None:
                torch.testing.assert_close(g.cpu(), e, equal_nan=True)
        compared += 1
    return compared


def run_all(dev, selected, compare_one):
    failures, samples = [], 0
    for op in selected:
        try:
            samples += compare_one(op, dev)
        except Exception as e:
            failures.append(f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}: "
                            f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
    assert not failures, f"{len(failures)}/{len(selected)} ops differ from CPU; first: {failures[0]}"
    return f"{len(selected)} OpInfos, {samples} samples compared with CPU"


def check_opinfo_forward(dev):
    """float32 samples of the sampled OpInfos give CPU's outputs (tolerances of assert_close)."""
    return run_all(dev, ops(), compare)


def check_opinfo_backward(dev):
    """Gradients of float32 samples of the sampled differentiable, deterministic OpInfos equal CPU's."""
    deterministic = [op for op in ops() if op.supports_autograd and not is_random(op)]
    return run_all(dev, deterministic, compare_backward)
