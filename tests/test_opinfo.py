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

The comparisons are kit/torch_emu_kit/conformance/checks/_parity.py, which the conformance suite's
``parity`` tier runs too. Known mismatches live in ``parity_known_failures.OPINFO_FAILURES``.
"""

import os
import sys

import pytest
import torch

from torch_emu_kit.conformance.checks import _parity  # the comparisons, shared with the conformance tier

sys.path.insert(0, os.path.dirname(__file__))
from parity_known_failures import OPINFO_FAILURES, marks_for  # noqa: E402

FULL = os.environ.get("TORCH_EMU_OPINFO_FULL", "") not in ("", "0")
# LITERALINCLUDE START: OPINFO_SAMPLING
STRIDE = 6  # default forward: every 6th OpInfo by sorted name (~17% of op_db)
BACKWARD_STRIDE = 2  # default backward: every 2nd OpInfo with autograd (half)
# LITERALINCLUDE END: OPINFO_SAMPLING
SAMPLES = None if FULL else 2
DTYPES = [torch.float32, torch.int64] + ([torch.bfloat16] if FULL else [])

_ALL_OPS = _parity.sorted_ops()
_OPS = _ALL_OPS if FULL else _ALL_OPS[::STRIDE]
_GRAD_OPS = [op for op in _ALL_OPS if op.supports_autograd]
if not FULL:
    _GRAD_OPS = _GRAD_OPS[::BACKWARD_STRIDE]


def _params():
    for op in _OPS:
        oid = _parity.op_id(op)
        for dtype in DTYPES:
            tid = f"{oid}-{str(dtype).split('.')[-1]}"
            yield pytest.param(op, dtype, id=tid, marks=marks_for(OPINFO_FAILURES, tid, oid))


def _backward_params():
    for op in _GRAD_OPS:
        oid = _parity.op_id(op)
        tid = f"{oid}-backward"
        yield pytest.param(op, id=tid, marks=marks_for(OPINFO_FAILURES, tid, oid))


@pytest.mark.parametrize("op,dtype", list(_params()))
def test_opinfo(op, dtype):
    if not op.supports_dtype(dtype, "cpu"):
        pytest.skip(f"{dtype} not supported on CPU")
    _parity.compare_op(op, "emu", dtype, SAMPLES)


@pytest.mark.parametrize("op", list(_backward_params()))
def test_opinfo_backward(op):
    if not op.supports_dtype(torch.float32, "cpu"):
        pytest.skip("float32 not supported on CPU")
    _parity.compare_op(op, "emu", torch.float32, SAMPLES, backward=True)
