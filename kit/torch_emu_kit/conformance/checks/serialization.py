"""torch.save/torch.load keep device tensors, their device and storage sharing; map_location moves them."""

import io

import torch

TIER = "serialization"
CHAPTER = "serialization"
ORDER = 80


def round_trip(obj, **kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **kwargs)


def check_tensor_round_trip(dev):
    """A saved device tensor loads on the same device with the same values and dtype."""
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        x = (torch.randn(5, 3) * 4).to(dtype).to(dev)
        y = round_trip(x)
        assert y.device == x.device and y.dtype == dtype and torch.equal(y.cpu(), x.cpu())


def check_views_share_storage(dev):
    """Two views of one device tensor still share one storage after loading."""
    base = torch.arange(10.0, device=dev)
    a, b = round_trip([base[2:], base[:4]])
    a[0] = -1
    assert b[2].item() == -1, "the loaded views do not share storage"


def check_map_location(dev):
    """map_location moves device tensors to CPU and CPU tensors to the device."""
    x = torch.randn(4, device=dev)
    y = round_trip(x, map_location="cpu")
    assert y.device.type == "cpu" and torch.equal(y, x.cpu())
    z = round_trip(torch.ones(3), map_location=dev)
    assert z.device.type == dev and z.sum().item() == 3
    last = torch.accelerator.device_count() - 1
    w = round_trip(x, map_location=f"{dev}:{last}")
    assert w.device == torch.device(dev, last)


def check_state_dict(dev):
    """A module's state_dict saved on the device loads into a CPU module with the same outputs."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).to(dev)
    model(torch.randn(8, 4, device=dev))  # moves the running statistics
    cpu = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    cpu.load_state_dict(round_trip(model.state_dict(), map_location="cpu"))
    x = torch.randn(3, 4)
    torch.testing.assert_close(cpu.eval()(x), model.eval()(x.to(dev)).cpu())


def check_weights_only_load(dev):
    """torch.load(weights_only=True) accepts device tensors."""
    x = torch.randn(3, device=dev)
    assert torch.equal(round_trip({"x": x}, weights_only=True)["x"].cpu(), x.cpu())
