"""The device module offers the torch.cuda-style functions that device-generic code calls."""

import inspect
import unittest

import torch

TIER = "api_surface"
CHAPTER = "python_frontend"
ORDER = 100
# What device-generic code (Lightning, Accelerate, torch.amp, the DataLoader...) calls on torch.<device>.
ESSENTIAL = ("is_available", "device_count", "current_device", "set_device", "synchronize", "device",
             "manual_seed", "manual_seed_all", "seed", "initial_seed", "get_rng_state", "set_rng_state",
             "current_stream", "default_stream", "stream", "Stream", "Event", "is_initialized",
             "memory_allocated", "max_memory_allocated", "memory_reserved", "empty_cache",
             "get_device_name", "get_device_properties")


def check_essential_functions(dev):
    """torch.<device> has every function device-generic code commonly calls."""
    mod = torch.get_device_module(dev)
    missing = [n for n in ESSENTIAL if not hasattr(mod, n)]
    assert not missing, f"torch.{dev} lacks {', '.join(missing)}"


def check_device_module_calls(dev):
    """The essential functions work: names, properties, default and current streams on the device."""
    mod = torch.get_device_module(dev)
    assert mod.is_available() and mod.device_count() >= 1
    assert isinstance(mod.get_device_name(0), str) and mod.get_device_name(0)
    assert mod.get_device_properties(0).total_memory > 0
    assert mod.current_stream().device.type == dev and mod.default_stream().device.type == dev
    with mod.device(0):
        assert mod.current_device() == 0


def check_cuda_name_coverage(dev):
    """Reports how many of torch.cuda's public functions torch.<device> has (a note, fails only below half)."""
    if torch.get_device_module(dev) is torch.cuda:
        raise unittest.SkipTest("the device is cuda itself")
    names = sorted(n for n, f in vars(torch.cuda).items()
                   if not n.startswith("_") and inspect.isfunction(f) and f.__module__.startswith("torch.cuda"))
    mod = torch.get_device_module(dev)
    have = [n for n in names if hasattr(mod, n)]
    assert len(have) * 2 >= len(names), f"torch.{dev} has only {len(have)}/{len(names)} of torch.cuda's functions"
    missing = [n for n in names if not hasattr(mod, n)]
    return f"{len(have)}/{len(names)} torch.cuda functions; missing: {', '.join(missing)}"
