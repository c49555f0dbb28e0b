"""Device-against-CPU comparisons over PyTorch's test databases: OpInfo, ModuleInfo, OptimizerInfo.

One implementation for the conformance tiers (``parity``, ``module_parity``, ``optim_parity``,
which load this file by path: it needs nothing of torch_emu) and for emu's pytest suites
(tests/test_opinfo.py, test_module_parity.py, test_optim_parity.py), so the two cannot drift.
Every function takes the device type under test and raises AssertionError on a difference; the
tolerances are ``torch.testing.assert_close``'s per-dtype defaults, those of a CPU-to-CPU
comparison. The databases are imported on first use: importing them takes seconds.
"""

import copy
import itertools
import os
import unittest

import torch
from torch.utils._pytree import tree_flatten, tree_map

# The tiers sample the databases unless the runner's --full sets this (emu's tests have their own switches).
FULL = os.environ.get("TORCH_CONFORMANCE_FULL", "") not in ("", "0")

# --- OpInfo ---------------------------------------------------------------------------------------

# Ops whose outputs are random or uninitialized: only shapes and dtypes can be compared.
RANDOM_OPS = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal", "uniform",
    "rand_like", "randn_like", "randint_like", "randint", "randn", "nn.functional.alpha_dropout",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.feature_alpha_dropout", "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d", "nn.functional.rrelu", "svd_lowrank", "pca_lowrank",
}
CPU_ARG_OPS = {"tensor_split"}  # their index arguments must be CPU tensors, on any device
# Ops for which PyTorch itself picks another algorithm on CPU than on other devices, in some dtypes:
# only shapes and dtypes can be compared there.
DEVICE_DEPENDENT = {
    # torch/nn/modules/linear_cross_entropy_options.py: options "auto" accumulate in float32 on CPU
    # ("accurate") and in the input dtype elsewhere ("compact").
    "nn.functional.linear_cross_entropy": (torch.bfloat16, torch.float16),
}


def op_id(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def sorted_ops() -> list:
    """PyTorch's OpInfo database in a fixed order (by name), so a stride samples the same ops."""
    from torch.testing._internal.common_methods_invocations import op_db

    return sorted(op_db, key=op_id)


def shape_only(op, dtype=None) -> bool:
    # has_nondeterministic_output: empty and its kin, whose memory is uninitialized.
    return (op.name in RANDOM_OPS or getattr(op, "has_nondeterministic_output", False)
            or dtype in DEVICE_DEPENDENT.get(op.name, ()))


def to_device(x, dev):
    """A copy of ``x`` on ``dev``; a leaf that needs a gradient stays a leaf that needs one."""
    if not isinstance(x, torch.Tensor):
        return x
    storage = x.untyped_storage() if x.layout == torch.strided and not (x.is_conj() or x.is_neg()) else None
    if storage is not None and (x.storage_offset() or storage.nbytes() != x.numel() * x.element_size()):
        # A view into a larger storage: copy the whole storage, ops like as_strided address all of it.
        flat = torch.empty(0, dtype=x.dtype).set_(storage, 0, (storage.nbytes() // x.element_size(),))
        moved = flat.to(dev).as_strided(x.shape, x.stride(), x.storage_offset())
    else:
        moved = x.detach().to(dev)
    return moved.requires_grad_() if x.requires_grad else moved


def move_sample(op, sample, dev):
    """The sample's input, args and kwargs on the device; factory-style samples build on the device."""
    kwargs = tree_map(lambda t: to_device(t, dev), sample.kwargs)
    if isinstance(kwargs.get("device"), (str, torch.device)) and torch.device(kwargs["device"]).type == "cpu":
        kwargs["device"] = dev
    args = sample.args if op.name in CPU_ARG_OPS else tree_map(lambda t: to_device(t, dev), sample.args)
    return tree_map(lambda t: to_device(t, dev), sample.input), args, kwargs


def assert_same(got, expected, what, dev, shape_only=False):
    """Same structure; tensors on ``dev`` and close to CPU's; other leaves equal (NaN equals NaN)."""
    got_leaves, got_spec = tree_flatten(got)
    exp_leaves, exp_spec = tree_flatten(expected)
    assert got_spec == exp_spec, f"{what}: structure differs: {got_spec} vs {exp_spec}"
    for i, (g, e) in enumerate(zip(got_leaves, exp_leaves)):
        if isinstance(e, torch.Tensor):
            assert isinstance(g, torch.Tensor), f"{what}[{i}]: {type(g).__name__} instead of a tensor"
            assert dev is None or g.device.type == dev, f"{what}[{i}]: on {g.device}, not {dev}"
            if shape_only:
                assert (g.shape, g.dtype) == (e.shape, e.dtype), \
                    f"{what}[{i}]: {g.shape} {g.dtype} vs {e.shape} {e.dtype}"
            else:
                torch.testing.assert_close(g.detach().cpu(), e.detach(), equal_nan=True,
                                           msg=lambda m, i=i: f"{what}[{i}]: {m}")
        elif not shape_only and not (isinstance(e, float) and e != e and g != g):
            assert g == e, f"{what}[{i}]: {g!r} != {e!r}"


def _builds_on(dev, op, inp, args, kwargs) -> bool:
    """Whether the op's results belong on the device (not a pure CPU factory call, not ``x.to("cpu")``)."""
    on_dev = kwargs.get("device") == dev or any(
        isinstance(t, torch.Tensor) and t.device.type == dev for t in tree_flatten((inp, args, kwargs))[0])
    to_cpu = any(a == "cpu" or (isinstance(a, torch.device) and a.type == "cpu") for a in tree_flatten(args)[0]
                 if isinstance(a, (str, torch.device)))
    return on_dev and not to_cpu


def compare_forward(op, sample, dev, dtype) -> bool:
    """The op on the device gives CPU's result for one sample; a sample CPU rejects, the device must
    reject too. Returns whether a result was compared."""
    inp, args, kwargs = move_sample(op, sample, dev)
    try:
        expected = op(sample.input, *sample.args, **sample.kwargs)
    except Exception:
        try:
            op(inp, *args, **kwargs)
        except Exception:
            return False
        raise AssertionError("CPU rejects this sample but the device accepts it")
    got = op(inp, *args, **kwargs)
    assert_same(got, expected, "output", dev if _builds_on(dev, op, inp, args, kwargs) else None,
                shape_only(op, dtype))
    return True


def _grad_leaves(tree) -> list:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor) and t.requires_grad]


def _sum_outputs(out):
    outs = [t for t in tree_flatten(out)[0]
            if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
    return sum(t.sum() for t in outs) if outs else None


def compare_backward(op, sample, dev, dtype) -> bool:
    """The gradients of the sum of the op's outputs on the device equal CPU's, for one sample that
    CPU can differentiate. Returns whether gradients were compared."""
    leaves = _grad_leaves(sample.input)
    try:
        loss = _sum_outputs(op(sample.input, *sample.args, **sample.kwargs))
        expected = torch.autograd.grad(loss, leaves, allow_unused=True) if loss is not None and leaves else None
    except Exception:
        return False  # no backward for this sample on CPU
    if expected is None:
        return False
    inp, args, kwargs = move_sample(op, sample, dev)
    got = torch.autograd.grad(_sum_outputs(op(inp, *args, **kwargs)), _grad_leaves(inp), allow_unused=True)
    assert [g is None for g in got] == [e is None for e in expected], "a gradient is missing on one side"
    assert_same([g for g in got if g is not None], [e for e in expected if e is not None], "gradient", dev,
                shape_only(op, dtype))
    return True


def compare_op(op, dev, dtype, samples=None, backward=False) -> int:
    """The first ``samples`` samples of ``op`` in ``dtype`` (all if None); returns how many were compared."""
    torch.manual_seed(0)  # sample inputs do not depend on what ran before
    compared = 0
    inputs = op.sample_inputs("cpu", dtype, requires_grad=backward)
    for i, sample in enumerate(itertools.islice(inputs, samples)):
        try:
            compared += (compare_backward if backward else compare_forward)(op, sample, dev, dtype)
        except Exception as e:
            raise AssertionError(f"{'backward ' if backward else ''}sample {i}: {one_line(e)}") from e
    return compared


def one_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


# --- ModuleInfo -----------------------------------------------------------------------------------

MODULE_SEED = 1234


def sorted_modules() -> list:
    from torch.testing._internal.common_modules import module_db

    return sorted(module_db, key=lambda info: info.name)


def module_inputs(info, dtype, training, max_inputs=None) -> list:
    """The ModuleInfo's module inputs, made on CPU; at most ``max_inputs``, spread over the list
    (nn.Transformer has 64, each a whole model)."""
    torch.manual_seed(MODULE_SEED)  # the inputs do not depend on what ran before
    inputs = info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=True, training=training)
    if max_inputs and len(inputs) > max_inputs:
        inputs = inputs[:: -(-len(inputs) // max_inputs)]
    return inputs


def _copy_leaves(tree, device):
    """Fresh leaf copies of the tensors in ``tree`` on ``device``: gradients start from none (module
    inputs may share tensors), and a tensor passed twice stays one tensor (KLDivLoss' scalar input
    is input and target)."""
    copies = {}

    def one(x):
        if not isinstance(x, torch.Tensor):
            return copy.deepcopy(x)
        if id(x) not in copies:
            copies[id(x)] = x.detach().to(device, copy=True).requires_grad_(x.requires_grad)
        return copies[id(x)]

    return tree_map(one, tree)


def _tensors(tree) -> list:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


# LITERALINCLUDE START: MODULE_FORWARD_BACKWARD
def _forward_backward(module, args, kwargs, leaves):
    # Seeds the device's and CPU's generators alike: Dropout, RReLU and FractionalMaxPool draw the
    # same numbers on both when the device's generator follows CPU's (emu's does).
    torch.manual_seed(MODULE_SEED)
    out = module(*args, **kwargs)
    outs = [t for t in _tensors(out) if t.requires_grad and t.is_floating_point()]
    if outs:
        # The same random output gradient on both devices, drawn on CPU.
        gen = torch.Generator().manual_seed(MODULE_SEED + 1)
        grads = [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for o in outs]
        torch.autograd.backward(outs, grads)
    return out, [t.grad for t in leaves if t.requires_grad]
# LITERALINCLUDE END: MODULE_FORWARD_BACKWARD


def compare_module_input(info, module_input, dtype, training, dev) -> bool:
    """One module input: outputs, gradients of inputs and parameters, and buffers afterwards equal
    CPU's. An input CPU rejects, the device must reject too. Returns whether it was compared."""
    ctor, fwd = module_input.constructor_input, module_input.forward_input
    if fwd is None:
        return False
    torch.manual_seed(MODULE_SEED)
    cpu_mod = info.module_cls(*ctor.args, **ctor.kwargs).to(dtype).train(training)
    cpu_args, cpu_kwargs = _copy_leaves((fwd.args, fwd.kwargs), "cpu")
    if info.is_lazy:  # parameters exist only after a first forward
        with torch.no_grad():
            cpu_mod(*cpu_args, **cpu_kwargs)
    dev_mod = copy.deepcopy(cpu_mod).to(dev)
    dev_args, dev_kwargs = _copy_leaves((cpu_args, cpu_kwargs), dev)
    cpu_leaves = _tensors((cpu_args, cpu_kwargs)) + list(cpu_mod.parameters())
    dev_leaves = _tensors((dev_args, dev_kwargs)) + list(dev_mod.parameters())
    try:
        cpu_out, cpu_grads = _forward_backward(cpu_mod, cpu_args, cpu_kwargs, cpu_leaves)
    except Exception:
        try:
            _forward_backward(dev_mod, dev_args, dev_kwargs, dev_leaves)
        except Exception:
            return False
        raise AssertionError("CPU rejects this input but the device accepts it")
    dev_out, dev_grads = _forward_backward(dev_mod, dev_args, dev_kwargs, dev_leaves)
    assert_same(dev_out, cpu_out, "output", dev)
    assert_same(dev_grads, cpu_grads, "gradient", dev)
    assert_same(list(dev_mod.buffers()), list(cpu_mod.buffers()), "buffer", dev)
    return True


def compare_module(info, dtype, training, dev, max_inputs=None) -> int:
    """Every (or ``max_inputs``) module input of ``info``; returns how many were compared."""
    compared = 0
    for i, module_input in enumerate(module_inputs(info, dtype, training, max_inputs)):
        error = None
        try:
            compared += compare_module_input(info, module_input, dtype, training, dev)
        except Exception as e:
            error = f"module input {i} ({module_input.desc or 'default'}): {one_line(e)}"
        # Raised outside the except block: the caught exception's frames hold device tensors,
        # which a caller's leak check needs freed.
        if error:
            raise AssertionError(error)
    return compared


# --- OptimizerInfo --------------------------------------------------------------------------------

def optim_db() -> list:
    from torch.testing._internal.common_optimizers import optim_db

    return optim_db


def optim_configs(info, dev) -> list:
    """The optimizer inputs PyTorch gives the device, plus the GPUs' capturable ones: PyTorch lists
    every PrivateUse1 backend as a capturable device."""
    configs = {c.desc: c for c in info.optim_inputs_func(device=dev)}
    for c in info.optim_inputs_func(device="cuda"):
        if c.kwargs.get("capturable"):
            configs.setdefault(c.desc, c)
    return list(configs.values())


def optim_impls(info) -> list:
    return ["forloop"] + [i for i in ("foreach", "fused") if i in info.supported_impls]


def optim_model(info, dtype):
    torch.manual_seed(0)
    if info.only_supports_sparse_grads:  # SparseAdam: sparse gradients of dense parameters
        return torch.nn.Embedding(6, 3, sparse=True).to(dtype)
    bias = info.name != "Muon"  # Muon takes 2-D parameters only
    return torch.nn.Sequential(
        torch.nn.Linear(4, 3, bias=bias), torch.nn.Tanh(), torch.nn.Linear(3, 2, bias=bias)
    ).to(dtype)


def _batches(info, dtype, steps):
    gen = torch.Generator().manual_seed(1)
    if info.only_supports_sparse_grads:
        return [torch.randint(0, 6, (5,), generator=gen) for _ in range(steps)]
    return [torch.randn(5, 4, generator=gen, dtype=dtype) for _ in range(steps)]


def _train(info, model, kwargs, batches, device):
    optim = info.optim_cls(model.parameters(), **kwargs)

    def closure():
        optim.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        return loss

    for x in batches:
        x = x.to(device)
        if info.step_requires_closure:
            optim.step(closure)
        else:
            closure()
            optim.step()
    return optim


# LITERALINCLUDE START: OPTIM_KWARGS
def optim_kwargs(config, impl, device):
    # CPU is not a capturable device: its reference runs the same maths uncaptured.
    kwargs = copy.deepcopy(config.kwargs)
    if impl != "forloop":
        kwargs[impl] = True
    if device == "cpu" and kwargs.get("capturable"):
        kwargs["capturable"] = False
    return kwargs
# LITERALINCLUDE END: OPTIM_KWARGS


def _fused_unsupported(e: Exception) -> bool:
    """PyTorch lists every PrivateUse1 backend as a fused device; a backend without the fused
    kernels fails in the constructor's device check or in the dispatcher at the first step."""
    text = str(e)
    return "`fused=True` requires" in text or ("_fused_" in text and isinstance(e, NotImplementedError))


def compare_optimizer(info, config, impl, dtype, dev, steps) -> None:
    """``steps`` steps of the optimizer on the device give CPU's parameters and state (the same
    implementation on CPU, which has foreach and fused kernels too). Raises unittest.SkipTest when
    CPU rejects the configuration, or for ``fused`` when the device has no fused kernel."""
    cpu_model, batches = optim_model(info, dtype), _batches(info, dtype, steps)
    try:
        cpu_optim = _train(info, cpu_model, optim_kwargs(config, impl, "cpu"), batches, "cpu")
    except Exception as e:
        if not config.kwargs.get("capturable"):
            raise unittest.SkipTest(f"CPU rejects this configuration: {one_line(e)}")
        # CPU cannot be the same implementation without capturable (a Tensor lr needs capturable
        # with foreach): the for-loop one is the reference.
        cpu_model = optim_model(info, dtype)
        cpu_optim = _train(info, cpu_model, optim_kwargs(config, "forloop", "cpu"), batches, "cpu")
    error = None
    try:
        dev_model = optim_model(info, dtype).to(dev)  # same seed: the CPU model's initial state
        dev_optim = _train(info, dev_model, optim_kwargs(config, impl, dev), batches, dev)
        tol = {}
        if config.kwargs.get("capturable") and dtype == torch.float64:
            # A capturable ``step`` is a float32 tensor (torch.optim's scalar dtype), so its bias
            # corrections round to float32; the CPU reference's are Python floats.
            tol = {"rtol": 1.3e-6, "atol": 1e-5}
        for (name, p), c in zip(dev_model.named_parameters(), cpu_model.parameters()):
            assert p.device.type == dev, f"parameter {name} on {p.device}"
            torch.testing.assert_close(p.detach().cpu(), c.detach(), **tol, msg=lambda m: f"parameter {name}: {m}")
        dev_state, cpu_state = dev_optim.state_dict()["state"], cpu_optim.state_dict()["state"]
        dev_leaves, dev_spec = tree_flatten(dev_state)
        cpu_leaves, cpu_spec = tree_flatten(cpu_state)
        assert dev_spec == cpu_spec, f"state structure differs: {dev_spec} vs {cpu_spec}"
        for i, (d, c) in enumerate(zip(dev_leaves, cpu_leaves)):
            if isinstance(c, torch.Tensor):  # ``step`` lives on the device only when capturable or fused
                torch.testing.assert_close(d.cpu(), c, check_dtype=False, **tol, msg=lambda m: f"state leaf {i}: {m}")
            else:
                assert d == c, f"state leaf {i}: {d!r} != {c!r}"
    except Exception as e:
        if impl == "fused" and _fused_unsupported(e):
            raise unittest.SkipTest(f"fused=True is not supported on {dev}: {one_line(e)}")
        error = one_line(e)
    # Raised outside the except block: the caught exception's frames hold device tensors.
    if error:
        raise AssertionError(error)
