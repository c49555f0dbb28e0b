"""PyTorch's ModuleInfo database (``module_db``) run on emu and compared with CPU.

For every ModuleInfo, in train and in eval mode, each of its module inputs
(from ``module_inputs_func``, made on CPU with ``requires_grad=True``) builds
the module on CPU; a deep copy moved with ``module.to("emu")`` has the same
parameters and buffers.  Both run forward on the same inputs with the same
seed (so Dropout, RReLU, FractionalMaxPool draw the same numbers: emu's
generator matches CPU's), then backward with the same random output gradient.
Outputs, input gradients, parameter gradients and buffers (e.g. BatchNorm's
running statistics) must match CPU's and live on emu.

The default run is every module in both modes and both dtypes, train in
float32 and eval in float64, with at most ``MAX_INPUTS`` of its module inputs
(evenly spread over the list: nn.Transformer has 64, each a whole model).
``TORCH_EMU_MODULE_FULL=1`` runs each mode in each dtype with every module
input.  The comparisons are kit/torch_emu_kit/conformance/checks/_parity.py, which the
conformance suite's ``module_parity`` tier runs too.  Known mismatches live in
``parity_known_failures.MODULE_FAILURES``.
"""

import os
import sys

import pytest
import torch

from torch_emu_kit.conformance.checks import _parity  # the comparisons, shared with the conformance tier

sys.path.insert(0, os.path.dirname(__file__))
from parity_known_failures import MODULE_FAILURES, marks_for  # noqa: E402

FULL = os.environ.get("TORCH_EMU_MODULE_FULL", "") not in ("", "0")
DTYPES = [torch.float32, torch.float64]
MAX_INPUTS = None if FULL else 4


def _params():
    for info in _parity.sorted_modules():
        for dtype in DTYPES:
            for training in (True, False):
                if not FULL and training != (dtype == torch.float32):
                    continue
                tid = f"{info.name}-{str(dtype).split('.')[-1]}-{'train' if training else 'eval'}"
                marks = marks_for(MODULE_FAILURES, tid, info.name)
                yield pytest.param(info, dtype, training, id=tid, marks=marks)


@pytest.mark.parametrize("info,dtype,training", list(_params()))
def test_module(info, dtype, training, baseline_memory):
    if dtype not in info.supported_dtypes("cpu"):
        pytest.skip(f"{dtype} not supported on CPU")
    if not _parity.compare_module(info, dtype, training, "emu", MAX_INPUTS):
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
