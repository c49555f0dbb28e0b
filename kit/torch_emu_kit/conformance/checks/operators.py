"""The minimal operators (empty, copies, views, fill) and the ops that run through them give CPU's results."""

import torch
import torch.nn.functional as F

TIER = "operators"
CHAPTER = "operators"
ORDER = 50
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool, torch.complex64)


def same(a, b, atol=1e-5, rtol=1.3e-6):
    torch.testing.assert_close(a.cpu(), b, atol=atol, rtol=rtol)


def check_copy_round_trip(dev):
    """Host to device to host keeps every common dtype bit for bit, contiguous or not."""
    for dtype in DTYPES:
        x = (torch.randn(7, 9) * 10).to(dtype)
        assert torch.equal(x.to(dev).cpu(), x), dtype
        nc = x.t()[::2]
        y = nc.to(dev)
        assert y.dtype == dtype and y.shape == nc.shape and torch.equal(y.cpu(), nc), dtype


def check_device_to_device_copy(dev):
    """copy_ between device tensors casts dtypes and handles non-contiguous sources and destinations."""
    x = torch.randn(6, 8)
    d = x.to(dev)
    out = torch.empty(8, 6, dtype=torch.float64, device=dev).t()
    out.copy_(d)
    assert torch.equal(out.cpu(), x.double())
    assert torch.equal(d.to(torch.int32).cpu(), x.to(torch.int32))


def check_factories(dev):
    """empty, zeros, ones, full, arange, eye and empty_strided have CPU's values, shapes and strides."""
    same(torch.zeros(3, 4, device=dev), torch.zeros(3, 4))
    same(torch.full((2, 5), 2.5, device=dev), torch.full((2, 5), 2.5))
    same(torch.arange(0, 10, 3, device=dev), torch.arange(0, 10, 3))
    same(torch.eye(4, device=dev), torch.eye(4))
    e = torch.empty_strided((3, 4), (1, 3), device=dev)
    assert e.stride() == (1, 3) and e.device.type == dev


def check_views(dev):
    """view, transpose, slicing, as_strided and unsqueeze share storage and see writes like CPU."""
    c = torch.arange(24.0).reshape(4, 6)
    d = c.to(dev)
    for f in (lambda t: t.view(6, 4), lambda t: t.t(), lambda t: t[1:, ::2], lambda t: t.as_strided((3, 3), (6, 1), 2),
              lambda t: t.unsqueeze(0)):
        v = f(d)
        assert v.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
        same(v, f(c))
    d[1:, ::2].fill_(-1)
    c[1:, ::2].fill_(-1)
    same(d, c)


def check_fallback_ops(dev):
    """A spread of ops (math, reductions, indexing, sorting, nn) gives CPU's results."""
    torch.manual_seed(0)
    a, b = torch.randn(8, 16), torch.randn(16, 5)
    img, w = torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3)
    idx = torch.tensor([0, 3, 3, 7])
    cases = [
        lambda a, b, img, w, idx: a @ b,
        lambda a, b, img, w, idx: (a.exp() + a.sin() * a.abs().sqrt()).tanh(),
        lambda a, b, img, w, idx: (a.sum(1), a.mean(0), a.amax(1), a.var(0), a.norm()),
        lambda a, b, img, w, idx: torch.sort(a, dim=1).values,
        lambda a, b, img, w, idx: (a.cumsum(1), torch.topk(a, 3).values, a.argmax(1)),
        lambda a, b, img, w, idx: (a[idx], a.index_select(0, idx), torch.where(a > 0, a, b.t()[:8, :5].sum())),
        lambda a, b, img, w, idx: (torch.cat([a, a * 2]), torch.stack([a, a]), a.flip(1)),
        lambda a, b, img, w, idx: F.softmax(a, -1),
        lambda a, b, img, w, idx: F.conv2d(img, w, padding=1),
        lambda a, b, img, w, idx: F.max_pool2d(img, 2),
        lambda a, b, img, w, idx: F.layer_norm(a, (16,)),
        lambda a, b, img, w, idx: F.cross_entropy(a, idx.repeat(2)),
    ]
    args = (a, b, img, w, idx)
    for case in cases:
        expected = case(*args)
        got = case(*(t.to(dev) for t in args))
        torch.testing.assert_close(tuple(t.cpu() for t in got) if isinstance(got, tuple) else got.cpu(), expected,
                                   atol=1e-4, rtol=1e-4)


def check_in_place_and_out(dev):
    """In-place ops and out= arguments write into the given device tensor like CPU."""
    c = torch.randn(5, 5)
    d = c.to(dev)
    d.mul_(3).add_(1)
    c.mul_(3).add_(1)
    same(d, c)
    out = torch.empty(5, 5, device=dev)
    torch.add(d, d, out=out)
    same(out, c + c)


def check_scalars(dev):
    """item(), tolist() and Python-number arguments work on device tensors."""
    d = torch.tensor([1.5, 2.5], device=dev)
    assert (d * 2 + 1).sum().item() == 10.0
    assert d.tolist() == [1.5, 2.5]


def check_mixed_devices_raise(dev):
    """An op mixing a device tensor with a non-scalar CPU tensor raises a RuntimeError."""
    try:
        torch.ones(3, device=dev) + torch.ones(3)
    except RuntimeError:
        return
    raise AssertionError("adding a device tensor and a CPU tensor did not raise")
