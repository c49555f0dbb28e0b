"""A sample of PyTorch's OpInfo database gives CPU's results on the device, in six dtypes (every op with --full)."""

import torch

import _parity as parity  # the comparisons, shared with emu's tests/test_opinfo.py

TIER = "parity"
CHAPTER = "operators"
ORDER = 55
SAMPLES = None if parity.FULL else 2
# By default every STRIDE-th OpInfo (by name) of those CPU supports in the dtype, each dtype from
# another offset so that together they cover more ops; every OpInfo and sample with --full.
STRIDE = {torch.float32: 4, torch.float64: 8, torch.bfloat16: 8, torch.float16: 8, torch.int64: 8, torch.bool: 8}
OTHER_DTYPES = list(STRIDE)[1:]


def run_all(dev, dtype, backward=False):
    """Compares the sampled OpInfos in ``dtype`` with CPU; fails with the count and the first difference."""
    supported = [op for op in parity.sorted_ops() if op.supports_dtype(dtype, "cpu")]
    if backward:
        supported = [op for op in supported if op.supports_autograd and not parity.shape_only(op)]
    offset = 0 if parity.FULL else list(STRIDE).index(dtype) % STRIDE[dtype]
    selected = supported if parity.FULL else supported[offset::STRIDE[dtype]]
    failures, samples = [], 0
    for op in selected:
        try:
            samples += parity.compare_op(op, dev, dtype, SAMPLES, backward)
        except Exception as e:
            failures.append((parity.op_id(op), parity.one_line(e)))
    assert not failures, (f"{len(failures)}/{len(selected)} ops differ from CPU "
                          f"({', '.join(name for name, _ in failures)}); first: {failures[0][1]}")
    return f"{len(selected)} OpInfos, {samples} samples compared with CPU"


def check_opinfo_forward(dev):
    """float32 samples of the sampled OpInfos give CPU's outputs (tolerances of assert_close)."""
    return run_all(dev, torch.float32)


def check_opinfo_forward_dtypes(dev):
    """float64, bfloat16, float16, int64 and bool samples of the sampled OpInfos give CPU's outputs."""
    notes, failures = [], []
    for dtype in OTHER_DTYPES:
        try:
            notes.append(f"{str(dtype)[6:]}: {run_all(dev, dtype)}")
        except AssertionError as e:
            failures.append(f"{str(dtype)[6:]}: {e}")
    assert not failures, "; ".join(failures)
    return "; ".join(notes)


def check_opinfo_backward(dev):
    """Gradients of float32 samples of the sampled differentiable, deterministic OpInfos equal CPU's."""
    return run_all(dev, torch.float32, backward=True)
