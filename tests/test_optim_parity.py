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

The default run is float32 with every configuration, each in one implementation,
taken in turn (forloop, foreach, fused, forloop...: every implementation of every
optimizer runs).  ``TORCH_EMU_OPTIM_FULL=1`` runs each configuration in every
implementation, adds float64 and more steps.  The comparisons are kit/torch_emu_kit/conformance/checks/_parity.py,
which the conformance suite's ``optim_parity`` tier runs too.  Known mismatches live in
``parity_known_failures.OPTIM_FAILURES``.
"""

import os
import sys

import pytest
import torch

from torch_emu_kit.conformance.checks import _parity  # the comparisons, shared with the conformance tier

sys.path.insert(0, os.path.dirname(__file__))
from parity_known_failures import OPTIM_FAILURES, marks_for  # noqa: E402

FULL = os.environ.get("TORCH_EMU_OPTIM_FULL", "") not in ("", "0")
DTYPES = [torch.float32] + ([torch.float64] if FULL else [])
STEPS = 5 if FULL else 3


def _params():
    for info in _parity.optim_db():
        impls = _parity.optim_impls(info)
        for i, config in enumerate(_parity.optim_configs(info, "emu")):
            for impl in impls if FULL else [impls[i % len(impls)]]:
                for dtype in DTYPES:
                    tid = f"{info.name}-{config.desc}-{impl}-{str(dtype).split('.')[-1]}"
                    marks = marks_for(OPTIM_FAILURES, tid, info.name)
                    yield pytest.param(info, config, impl, dtype, id=tid, marks=marks)


@pytest.mark.parametrize("info,config,impl,dtype", list(_params()))
def test_optimizer(info, config, impl, dtype, baseline_memory):
    # CPU rejecting the configuration raises unittest.SkipTest: a pytest skip.
    _parity.compare_optimizer(info, config, impl, dtype, "emu", STEPS)


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


_FUSED = [info for info in _parity.optim_db() if "fused" in info.supported_impls]


@pytest.mark.parametrize("info", _FUSED, ids=[info.name for info in _FUSED])
def test_fused_step_runs_the_fused_kernel(info, baseline_memory):
    # The fused kernels (aten::_fused_adam_...) are CPU kernels run by the
    # fallback on emu memory: one call for all parameters, not a loop.
    from torch_emu.tools import fallback_report

    model = _parity.optim_model(info, torch.float32).to("emu")
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
