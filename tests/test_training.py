"""Real training on emu: same losses as CPU, on both devices, and no leaks."""

import gc

import pytest
import torch


def _fit(opt, compute_loss, steps):
    """``steps`` optimizer steps on the loss ``compute_loss()``; the losses."""
    losses = []
    for _ in range(steps):
        loss = compute_loss()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _train(device, steps, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 3)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.randn(128, 16, generator=torch.Generator().manual_seed(seed)).to(device)
    target = (data[:, :3] * 2).to(device)
    losses = _fit(opt, lambda: torch.nn.functional.mse_loss(model(data), target), steps)
    return losses, model


@pytest.mark.parametrize("device", ["emu:0", "emu:1"])
def test_training_matches_cpu(device):
    cpu, _ = _train("cpu", 30)
    emu, model = _train(device, 30)
    assert all(p.device == torch.device(device) for p in model.parameters())
    torch.testing.assert_close(emu, cpu, rtol=1e-5, atol=1e-6)
    assert emu[-1] < emu[0] / 2


def test_demo_runs(capsys):
    from torch_emu.demo import run

    assert run(steps=40) == 0
    out = capsys.readouterr().out
    assert "emu:1" in out and "match" in out and "ratio emu/CPU" in out


@pytest.mark.launch_mode
def test_thousand_steps_do_not_leak():
    gc.collect()
    torch.emu.synchronize()
    baseline = torch.emu.memory_allocated()
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).emu()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x, y = torch.randn(64, 32, device="emu"), torch.randn(64, 1, device="emu")
    after_first = None
    for step in range(1000):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step == 0:
            after_first = torch.emu.memory_allocated()
    # Steady state: no growth after the first step (optimizer state exists).
    assert torch.emu.memory_allocated() == after_first
    del model, opt, x, y, loss
    gc.collect()
    torch.emu.synchronize()
    assert torch.emu.memory_allocated() == baseline


def test_backward_runs_on_the_calling_thread():
    # See torch_emu/__init__.py (AUTOGRAD_THREADS): no per-device engine thread.
    import threading

    seen = []
    x = torch.ones(3, device="emu", requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: seen.append(threading.get_ident()))
    y.sum().backward()
    assert seen == [threading.get_ident()]
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def _train_cnn(device, steps=15):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(16, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 1, 12, 12, generator=g).to(device), torch.randint(0, 10, (16,), generator=g).to(device)
    return _fit(opt, lambda: torch.nn.functional.cross_entropy(model(x), y), steps)


def test_cnn_training_matches_cpu():
    torch.testing.assert_close(_train_cnn("emu"), _train_cnn("cpu"), rtol=1e-4, atol=1e-5)
