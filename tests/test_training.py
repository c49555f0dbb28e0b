"""Real training on emu: same losses as CPU, on both devices, and no leaks."""

import gc

import pytest
import torch


def _train(device, steps, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 3)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.randn(128, 16, generator=torch.Generator().manual_seed(seed)).to(device)
    target = (data[:, :3] * 2).to(device)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(model(data), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
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
