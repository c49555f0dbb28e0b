"""PyTorch's OptimizerInfo database (``optim_db``) run on emu and compared with CPU.

For every optimizer, each configuration its ``optim_inputs_func`` gives the
emu device, and each implementation it supports (``forloop``, ``foreach``,
``fused``), a small model is built on CPU and, with the same seed, moved to emu; both take
``STEPS`` optimizer steps on the same data.  Parameters and the optimizer
state must then match CPU's (same implementation on CPU, which has
foreach and fused kernels too).

emu is a capturable device (``torch.optim.optimizer._get_capturable_supported_devices``
lists the PrivateUse1 backend), so the ``capturable`` configurations PyTorch
tests on GPUs run too; CPU, which cannot capture, is then the reference
without ``capturable``.

The default run is float32 with every configuration.  ``TORCH_EMU_OPTIM_FULL=1``
adds float64 and more steps.  Known mismatches live in
``parity_known_failures.OPTIM_FAILURES``.
"""

import copy
import os
import sys

import pytest
import torch
from torch.testing._internal.common_optimizers import optim_db
from torch.utils._pytree import tree_flatten

sys.path.insert(0, os.path.dirname(__file__))
from parity_known_failures import OPTIM_FAILURES, marks_for  # noqa: E402

FULL = os.environ.get("TORCH_EMU_OPTIM_FULL", "") not in ("", "0")
DTYPES = [torch.float32] + ([torch.float64] if FULL else [])
STEPS = 5 if FULL else 3


def _configs(info):
    """The optimizer inputs for emu, plus the GPUs' capturable ones."""
    configs = {c.desc: c for c in info.optim_inputs_func(device="emu")}
    for c in info.optim_inputs_func(device="cuda"):
        if c.kwargs.get("capturable"):
            configs.setdefault(c.desc, c)
    return list(configs.values())


def _impls(info):
    return ["forloop"] + [i for i in ("foreach", "fused") if i in info.supported_impls]


def _params():
    for info in optim_db:
        for config in _configs(info):
            for impl in _impls(info):
                for dtype in DTYPES:
                    tid = f"{info.name}-{config.desc}-{impl}-{str(dtype).split('.')[-1]}"
                    marks = marks_for(OPTIM_FAILURES, tid, info.name)
                    yield pytest.param(info, config, impl, dtype, id=tid, marks=marks)


def _model(info, dtype):
    torch.manual_seed(0)
    if info.only_supports_sparse_grads:  # SparseAdam: sparse gradients of dense parameters
        return torch.nn.Embedding(6, 3, sparse=True).to(dtype)
    bias = info.name != "Muon"  # Muon takes 2-D parameters only
    return torch.nn.Sequential(
        torch.nn.Linear(4, 3, bias=bias), torch.nn.Tanh(), torch.nn.Linear(3, 2, bias=bias)
    ).to(dtype)


def _batches(info, dtype):
    gen = torch.Generator().manual_seed(1)
    if info.only_supports_sparse_grads:
        return [torch.randint(0, 6, (5,), generator=gen) for _ in range(STEPS)]
    return [torch.randn(5, 4, generator=gen, dtype=dtype) for _ in range(STEPS)]


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
def _kwargs(config, impl, device):
    # CPU is not a capturable device: its reference runs the same maths uncaptured.
    kwargs = copy.deepcopy(config.kwargs)
    if impl != "forloop":
        kwargs[impl] = True
    if device == "cpu" and kwargs.get("capturable"):
        kwargs["capturable"] = False
    return kwargs
# LITERALINCLUDE END: OPTIM_KWARGS


def _assert_state_equal(emu_optim, cpu_optim, tol):
    emu_state, cpu_state = emu_optim.state_dict()["state"], cpu_optim.state_dict()["state"]
    emu_leaves, emu_spec = tree_flatten(emu_state)
    cpu_leaves, cpu_spec = tree_flatten(cpu_state)
    assert emu_spec == cpu_spec, f"state structure differs: {emu_spec} vs {cpu_spec}"
    for i, (e, c) in enumerate(zip(emu_leaves, cpu_leaves)):
        if isinstance(c, torch.Tensor):
            # ``step`` lives on the device only when capturable or fused.
            torch.testing.assert_close(e.cpu(), c, check_dtype=False, **tol, msg=lambda m: f"state leaf {i}: {m}")
        else:
            assert e == c, f"state leaf {i}: {e!r} != {c!r}"


def _compare(info, config, impl, dtype, cpu_model, cpu_optim, batches):
    emu_model = _model(info, dtype).to("emu")  # same seed: the CPU model's initial state
    emu_optim = _train(info, emu_model, _kwargs(config, impl, "emu"), batches, "emu")
    tol = {}
    if config.kwargs.get("capturable") and dtype == torch.float64:
        # A capturable ``step`` is a float32 tensor (torch.optim's scalar dtype),
        # so its bias corrections round to float32; the CPU reference's are floats.
        tol = {"rtol": 1.3e-6, "atol": 1e-5}
    for (name, e), c in zip(emu_model.named_parameters(), cpu_model.parameters()):
        assert e.device.type == "emu", f"parameter {name} on {e.device}"
        torch.testing.assert_close(e.detach().cpu(), c.detach(), **tol, msg=lambda m: f"parameter {name}: {m}")
    _assert_state_equal(emu_optim, cpu_optim, tol)


@pytest.mark.parametrize("info,config,impl,dtype", list(_params()))
def test_optimizer(info, config, impl, dtype, baseline_memory):
    cpu_model = _model(info, dtype)
    batches = _batches(info, dtype)
    try:
        cpu_optim = _train(info, cpu_model, _kwargs(config, impl, "cpu"), batches, "cpu")
    except Exception as exc:
        if not config.kwargs.get("capturable"):
            pytest.skip(f"CPU rejects this configuration: {exc}")
        # CPU cannot be the same implementation without capturable (a Tensor
        # lr needs capturable with foreach): the for-loop one is the reference.
        cpu_model = _model(info, dtype)
        cpu_optim = _train(info, cpu_model, _kwargs(config, "forloop", "cpu"), batches, "cpu")
    error = None
    try:
        _compare(info, config, impl, dtype, cpu_model, cpu_optim, batches)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    # Raised outside the except block: the caught exception's frames hold emu
    # tensors (pytest keeps the last failure alive), which must be freed
    # before the leak check.
    if error:
        raise AssertionError(error)


# LITERALINCLUDE START: OPTIM_DEVICE_LISTS
def test_emu_is_a_foreach_fused_and_capturable_device():
    # PyTorch lists the PrivateUse1 backend by its registered name: emu gets
    # the foreach and fused defaults and the capturable checks with no patch.
    from torch.optim.optimizer import _get_capturable_supported_devices
    from torch.utils._foreach_utils import (
        _get_foreach_kernels_supported_devices,
        _get_fused_kernels_supported_devices,
    )

    assert "emu" in _get_foreach_kernels_supported_devices()
    assert "emu" in _get_fused_kernels_supported_devices()
    assert "emu" in _get_capturable_supported_devices()
# LITERALINCLUDE END: OPTIM_DEVICE_LISTS


_FUSED = [info for info in optim_db if "fused" in info.supported_impls]


@pytest.mark.parametrize("info", _FUSED, ids=[info.name for info in _FUSED])
def test_fused_step_runs_the_fused_kernel(info, baseline_memory):
    # The fused kernels (aten::_fused_adam_...) are CPU kernels run by the
    # fallback on emu memory: one call for all parameters, not a loop.
    from torch_emu.tools import fallback_report

    model = _model(info, torch.float32).to("emu")
    optim = info.optim_cls(model.parameters(), fused=True)
    model(torch.randn(5, 4, device="emu")).sum().backward()
    with fallback_report() as report:
        optim.step()
    fused = [op for op in report.ops if op.startswith("aten::_fused_")]
    assert fused == [f"aten::_fused_{info.name.lower()}_"], report.ops


@pytest.mark.parametrize("impl", ["forloop", "foreach", "fused"])
def test_parameters_on_emu_and_cpu_in_one_optimizer(impl, baseline_memory):
    # Optimizers group tensors by device: an emu and a CPU parameter in one
    # Adam must step exactly like two CPU parameters.
    torch.manual_seed(0)
    cpu_params = [torch.nn.Parameter(torch.randn(4)) for _ in range(2)]
    mixed = [cpu_params[0].detach().clone().to("emu").requires_grad_(), cpu_params[1].detach().clone().requires_grad_()]
    kwargs = {} if impl == "forloop" else {impl: True}
    optims = [torch.optim.Adam(ps, **kwargs) for ps in (cpu_params, mixed)]
    for _ in range(3):
        for ps, optim in zip((cpu_params, mixed), optims):
            optim.zero_grad()
            sum((p.cpu() ** 2).sum() for p in ps).backward()
            optim.step()
    assert mixed[0].device.type == "emu" and mixed[1].device.type == "cpu"
    for m, c in zip(mixed, cpu_params):
        torch.testing.assert_close(m.detach().cpu(), c.detach())


def test_gradient_on_another_device_is_rejected(baseline_memory):
    param = torch.nn.Parameter(torch.randn(3, device="emu"))
    with pytest.raises(RuntimeError, match="same device"):
        param.grad = torch.randn(3)
    param.grad = torch.randn(3, device="emu")
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
        torch.optim.Adam([param], fused=True, foreach=True)
