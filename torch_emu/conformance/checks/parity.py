"""A sample of PyTorch's OpInfo database gives CPU's results on the device in six dtypes (every op with --full)."""

import importlib.util
import os
import pathlib

import torch

TIER = "parity"
CHAPTER = "operators"
ORDER = 55
FULL = os.environ.get("TORCH_CONFORMANCE_FULL", "") not in ("", "0")  # set by --full
SAMPLES = None if FULL else 2
# By default every STRIDE-th OpInfo (by name) of those CPU supports in the dtype, each dtype from
# another offset so that together they cover more ops; every OpInfo and sample with --full.
STRIDE = {torch.float32: 4, torch.float64: 8, torch.bfloat16: 8, torch.float16: 8, torch.int64: 8, torch.bool: 8}
_spec = importlib.util.spec_from_file_location("_conformance_parity", pathlib.Path(__file__).with_name("_parity.py"))
parity = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(parity)  # the comparisons, shared with emu's tests/test_opinfo.py


def run_all(dev, dtype, backward=False):
    """Compares the sampled OpInfos in ``dtype`` with CPU; fails with the count and the first difference."""
    supported = [op for op in parity.sorted_ops() if op.supports_dtype(dtype, "cpu")]
    if backward:
        supported = [op for op in supported if op.supports_autograd and not parity.shape_only(op)]
    offset = 0 if FULL else list(STRIDE).index(dtype) % STRIDE[dtype]
    selected = supported if FULL else supported[offset::STRIDE[dtype]]
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


def check_opinfo_forward_float64(dev):
    """float64 samples of the sampled OpInfos give CPU's outputs."""
    return run_all(dev, torch.float64)


def check_opinfo_forward_bfloat16(dev):
    """bfloat16 samples of the sampled OpInfos give CPU's outputs (assert_close's bfloat16 tolerances)."""
    return run_all(dev, torch.bfloat16)


def check_opinfo_forward_float16(dev):
    """float16 samples of the sampled OpInfos give CPU's outputs (assert_close's float16 tolerances)."""
    return run_all(dev, torch.float16)


def check_opinfo_forward_int64(dev):
    """int64 samples of the sampled OpInfos give CPU's outputs exactly."""
    return run_all(dev, torch.int64)


def check_opinfo_forward_bool(dev):
    """bool samples of the sampled OpInfos give CPU's outputs exactly."""
    return run_all(dev, torch.bool)


def check_opinfo_backward(dev):
    """Gradients of float32 samples of the sampled differentiable, deterministic OpInfos equal CPU's."""
    return run_all(dev, torch.float32, backward=True)
