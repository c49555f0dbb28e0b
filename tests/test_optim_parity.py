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


def _kwargs(config, impl, device):
    kwargs = copy.deepcopy(config.kwargs)
    if impl != "forloop":
        kwargs[impl] = True
    if device == "cpu" and kwargs.get("capturable"):
        kwargs["capturable"] = False
    return kwargs


def _assert_state_equal(emu_optim, cpu_optim):
    emu_state, cpu_state = emu_optim.state_dict()["state"], cpu_optim.state_dict()["state"]
    emu_leaves, emu_spec = tree_flatten(emu_state)
    cpu_leaves, cpu_spec = tree_flatten(cpu_state)
    assert emu_spec == cpu_spec, f"state structure differs: {emu_spec} vs {cpu_spec}"
    for i, (e, c) in enumerate(zip(emu_leaves, cpu_leaves)):
        if isinstance(c, torch.Tensor):
            # ``step`` lives on the device only when capturable or fused.
            torch.testing.assert_close(e.cpu(), c, check_dtype=False, msg=lambda m: f"state leaf {i}: {m}")
        else:
            assert e == c, f"state leaf {i}: {e!r} != {c!r}"


def _compare(info, config, impl, dtype, cpu_model, cpu_optim, batches):
    emu_model = _model(info, dtype).to("emu")  # same seed: the CPU model's initial state
    emu_optim = _train(info, emu_model, _kwargs(config, impl, "emu"), batches, "emu")
    for (name, e), c in zip(emu_model.named_parameters(), cpu_model.parameters()):
        assert e.device.type == "emu", f"parameter {name} on {e.device}"
        torch.testing.assert_close(e.detach().cpu(), c.detach(), msg=lambda m: f"parameter {name}: {m}")
    _assert_state_equal(emu_optim, cpu_optim)


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
