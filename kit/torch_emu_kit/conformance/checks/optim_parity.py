"""A sample of PyTorch's OptimizerInfo database: device steps give CPU's parameters and state (all with --full)."""

import unittest

import torch

import _parity as parity  # the comparisons, shared with emu's tests/test_optim_parity.py

TIER = "optim_parity"
CHAPTER = "testing"
ORDER = 57
# By default every STRIDE-th (optimizer, configuration) pair of an implementation, float32, three
# steps; with --full every pair, float64 too, five steps (as emu's tests/test_optim_parity.py).
STRIDE = 1 if parity.FULL else 3
DTYPES = (torch.float32, torch.float64) if parity.FULL else (torch.float32,)
STEPS = 5 if parity.FULL else 3


def run_all(dev, impl, capturable):
    """Compares the sampled configurations of ``impl`` with CPU. Skips when every one was skipped
    (CPU rejects it, or the device has no fused kernel), with the first reason."""
    pairs = [(info, config) for info in parity.optim_db() if impl in parity.optim_impls(info)
             for config in parity.optim_configs(info, dev) if bool(config.kwargs.get("capturable")) == capturable]
    selected = pairs[::STRIDE]
    failures, skips, compared = [], [], 0
    for info, config in selected:
        for dtype in DTYPES:
            name = f"{info.name} ({config.desc}, {str(dtype).split('.')[-1]})"
            try:
                parity.compare_optimizer(info, config, impl, dtype, dev, STEPS)
                compared += 1
            except unittest.SkipTest as e:
                skips.append((name, str(e)))
            except Exception as e:
                failures.append((name, parity.one_line(e)))
    assert not failures, (f"{len(failures)}/{len(selected) * len(DTYPES)} configurations differ from CPU "
                          f"({', '.join(name for name, _ in failures)}); first: {failures[0][1]}")
    if skips and not compared:
        raise unittest.SkipTest(f"{skips[0][0]}: {skips[0][1]}")
    skipped = f"; {len(skips)} skipped, first: {skips[0][0]}: {skips[0][1]}" if skips else ""
    return f"{compared} configurations of {len({info.name for info, _ in selected})} optimizers equal CPU's{skipped}"


def check_forloop(dev):
    """The for-loop implementations (foreach=False) step like CPU's."""
    return run_all(dev, "forloop", capturable=False)


def check_foreach(dev):
    """The foreach implementations (the default on a foreach device) step like CPU's."""
    return run_all(dev, "foreach", capturable=False)


def check_fused(dev):
    """The fused implementations step like CPU's fused kernels (skipped where the device has none)."""
    return run_all(dev, "fused", capturable=False)


def check_capturable(dev):
    """capturable=True configurations (for-loop, foreach, fused) step like CPU's uncaptured maths."""
    notes = []
    for impl in ("forloop", "foreach", "fused"):
        try:
            notes.append(f"{impl}: {run_all(dev, impl, capturable=True)}")
        except unittest.SkipTest as e:
            notes.append(f"{impl}: skipped ({e})")
    return "; ".join(notes)
