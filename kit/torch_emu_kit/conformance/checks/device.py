"""The device is visible, selectable, and the device guard puts work on the tensor's device."""

import unittest

import torch

TIER = "device"
CHAPTER = "device_guard"
ORDER = 10


def check_is_available(dev):
    """torch.accelerator reports the backend as the current accelerator, with at least one device."""
    assert torch.accelerator.is_available(), "torch.accelerator.is_available() is False"
    current = torch.accelerator.current_accelerator()
    assert current.type == dev, f"the current accelerator is {current.type!r}, not {dev!r}"
    assert torch.get_device_module(dev).device_count() == torch.accelerator.device_count() >= 1


def check_set_device(dev):
    """set_device_index / current_device_index round trip on every device, and the guard context restores it."""
    count = torch.accelerator.device_count()
    before = torch.accelerator.current_device_index()
    try:
        for i in range(count):
            torch.accelerator.set_device_index(i)
            assert torch.accelerator.current_device_index() == i
        torch.accelerator.set_device_index(0)
        with torch.accelerator.device_index(count - 1):
            assert torch.accelerator.current_device_index() == count - 1
        assert torch.accelerator.current_device_index() == 0, "device_index() did not restore the device"
    finally:
        torch.accelerator.set_device_index(before)


def check_tensor_device(dev):
    """A tensor created with an explicit index lives on that device; an index-less one on the current device."""
    last = torch.accelerator.device_count() - 1
    assert torch.empty(2, device=f"{dev}:{last}").device == torch.device(dev, last)
    with torch.accelerator.device_index(last):
        assert torch.empty(2, device=dev).device == torch.device(dev, last)


# LITERALINCLUDE START: CHECK_EXAMPLE
def check_guard_follows_tensor(dev):
    """An op on a tensor of device 1 runs there while device 0 is current, and leaves device 0 current."""
    if torch.accelerator.device_count() < 2:
        raise unittest.SkipTest("needs two devices")
    torch.accelerator.set_device_index(0)
    x = torch.arange(6.0, device=f"{dev}:1")
    y = (x * 2).sum()
    assert y.device == torch.device(dev, 1) and y.item() == 30.0
    assert torch.accelerator.current_device_index() == 0
# LITERALINCLUDE END: CHECK_EXAMPLE


def check_copy_between_devices(dev):
    """Copies between two devices of the backend keep the values."""
    if torch.accelerator.device_count() < 2:
        raise unittest.SkipTest("needs two devices")
    x = torch.randn(100, device=f"{dev}:0")
    y = x.to(f"{dev}:1")
    assert y.device.index == 1 and torch.equal(y.cpu(), x.cpu())


def check_bad_index(dev):
    """A device index past device_count raises a Python exception, and the process keeps working."""
    count = torch.accelerator.device_count()
    try:
        torch.empty(2, device=f"{dev}:{count}")
    except (RuntimeError, ValueError, AssertionError):
        pass
    else:
        raise AssertionError(f"creating a tensor on {dev}:{count} did not raise")
    assert torch.ones(2, device=dev).sum().item() == 2


def check_synchronize(dev):
    """torch.accelerator.synchronize and the device module's synchronize return for every device."""
    for i in range(torch.accelerator.device_count()):
        torch.accelerator.synchronize(i)
    torch.get_device_module(dev).synchronize()
