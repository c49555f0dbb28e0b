"""Pinned host memory for the accelerator, asynchronous copies from it, and DataLoader(pin_memory=True)."""

import torch
from torch.utils.data import DataLoader, TensorDataset

TIER = "data_loading"
CHAPTER = "data_loading"
ORDER = 90


def check_pin_memory(dev):
    """tensor.pin_memory() and empty(pin_memory=True) give pinned CPU tensors with the same values."""
    x = torch.randn(100)
    p = x.pin_memory()
    assert p.is_pinned() and p.device.type == "cpu" and torch.equal(p, x)
    assert torch.empty(10, pin_memory=True).is_pinned()
    assert not x.is_pinned()


def check_non_blocking_copies(dev):
    """non_blocking copies host to device and back through pinned memory give the values after synchronize."""
    x = torch.randn(1 << 16).pin_memory()
    d = x.to(dev, non_blocking=True)
    back = torch.empty_like(x).pin_memory()
    back.copy_(d * 2, non_blocking=True)
    torch.accelerator.synchronize()
    assert torch.equal(back, x * 2)


def check_dataloader_pin_memory(dev):
    """DataLoader(pin_memory=True) yields pinned batches with the dataset's values, with and without workers."""
    data = TensorDataset(torch.arange(64.0).reshape(32, 2), torch.arange(32))
    for workers in (0, 1):
        seen = 0
        for x, y in DataLoader(data, batch_size=8, pin_memory=True, num_workers=workers):
            assert x.is_pinned() and y.is_pinned(), f"batch not pinned with num_workers={workers}"
            d = x.to(dev, non_blocking=True)
            assert torch.equal(d.cpu()[:, 0], y.float() * 2)
            seen += len(y)
        assert seen == 32
