"""A sample of PyTorch's ModuleInfo database gives CPU's outputs, gradients and buffers on the device (all: --full)."""

import torch

import _parity as parity  # the comparisons, shared with emu's tests/test_module_parity.py

TIER = "module_parity"
CHAPTER = "testing"
ORDER = 56
# By default every STRIDE-th ModuleInfo (by name), each check from another offset so that together
# they cover every module, at most MAX_INPUTS module inputs each; every module input with --full.
STRIDE = 1 if parity.FULL else 3
MAX_INPUTS = None if parity.FULL else 2


def run_all(dev, dtype, training, offset):
    """Compares the sampled modules in one mode with CPU; fails with the count and the first difference."""
    supported = [info for info in parity.sorted_modules() if dtype in info.supported_dtypes("cpu")]
    selected = supported[offset % STRIDE::STRIDE]
    failures, inputs = [], 0
    for info in selected:
        try:
            inputs += parity.compare_module(info, dtype, training, dev, MAX_INPUTS)
        except Exception as e:
            failures.append((info.name, parity.one_line(e)))
    assert not failures, (f"{len(failures)}/{len(selected)} modules differ from CPU "
                          f"({', '.join(name for name, _ in failures)}); first: {failures[0][1]}")
    return f"{len(selected)} ModuleInfos, {inputs} module inputs compared with CPU"


def check_modules_train(dev):
    """float32 modules in train mode: outputs, input and parameter gradients, buffers equal CPU's."""
    return run_all(dev, torch.float32, True, offset=0)


def check_modules_eval(dev):
    """float32 modules in eval mode: outputs, input and parameter gradients, buffers equal CPU's."""
    return run_all(dev, torch.float32, False, offset=1)


def check_modules_float64(dev):
    """float64 modules equal CPU's: in train mode (in both modes with --full)."""
    modes = (True, False) if parity.FULL else (True,)
    return "; ".join(run_all(dev, torch.float64, training, offset=2) for training in modes)
