"""Autocast lowers matmuls and keeps precision-sensitive ops in float32; GradScaler skips steps with inf gradients."""

import torch
import torch.nn.functional as F

TIER = "amp"
CHAPTER = "amp"
ORDER = 70


def check_autocast_available(dev):
    """torch.amp reports autocast for the device, with a half-precision default dtype."""
    assert torch.amp.is_autocast_available(dev), f"torch.amp.is_autocast_available({dev!r}) is False"
    assert torch.get_autocast_dtype(dev) in (torch.float16, torch.bfloat16)


def check_lower_precision_ops(dev):
    """Under autocast, mm, linear and conv2d run in the autocast dtype, for float16 and bfloat16."""
    x, w, img, k = (torch.randn(4, 8, device=dev), torch.randn(3, 8, device=dev),
                    torch.randn(1, 2, 5, 5, device=dev), torch.randn(2, 2, 3, 3, device=dev))
    for dtype in (torch.float16, torch.bfloat16):
        with torch.autocast(dev, dtype=dtype):
            for out in (x @ x.t(), F.linear(x, w), F.conv2d(img, k)):
                assert out.dtype == dtype, (dtype, out.dtype)
        assert (x @ x.t()).dtype == torch.float32, "autocast leaked out of its context"


def check_float32_ops(dev):
    """Under autocast, ops CUDA's policy keeps in float32 (softmax, log_softmax, mse_loss, exp, sum) return float32."""
    x = torch.randn(4, 8, device=dev)
    with torch.autocast(dev, dtype=torch.bfloat16):
        y = x @ x.t()
        for name, out in (("softmax", y.softmax(-1)), ("log_softmax", F.log_softmax(y, -1)),
                          ("mse_loss", F.mse_loss(y, y)), ("exp", y.exp()), ("sum", y.sum())):
            assert out.dtype == torch.float32, f"{name} under autocast gave {out.dtype}"


def check_matches_cpu_autocast_values(dev):
    """A bfloat16 autocast matmul gives CPU's bfloat16 autocast result."""
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = a @ b
    with torch.autocast(dev, dtype=torch.bfloat16):
        got = a.to(dev) @ b.to(dev)
    torch.testing.assert_close(got.cpu(), expected, atol=1e-2, rtol=1.6e-2)


def check_grad_scaler(dev):
    """GradScaler steps normally on finite gradients and skips the step and halves the scale on inf."""
    model = torch.nn.Linear(4, 2).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(dev, init_scale=1024.0)
    x = torch.randn(8, 4, device=dev)
    with torch.autocast(dev, dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    before = model.weight.detach().clone()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(model.weight.detach(), before), "a finite step did not change the weights"
    assert scaler.get_scale() == 1024.0
    opt.zero_grad()
    with torch.autocast(dev, dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    model.weight.grad[0, 0] = float("inf")
    before = model.weight.detach().clone()
    scaler.step(opt)
    scaler.update()
    assert torch.equal(model.weight.detach(), before), "a step with an inf gradient was not skipped"
    assert scaler.get_scale() == 512.0, scaler.get_scale()
