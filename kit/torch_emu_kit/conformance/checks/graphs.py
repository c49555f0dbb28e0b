"""torch.accelerator.Graph captures work without running it, and replays it on new data like eager."""

import torch

TIER = "graphs"
CHAPTER = "graphs"
ORDER = 130


def check_capture_then_replay(dev):
    """Captured work does not run during capture; each replay runs it once."""
    x = torch.zeros(5, device=dev)
    stream, g = torch.Stream(device=dev), torch.accelerator.Graph()
    with stream, g:
        x += 1
    torch.accelerator.synchronize()
    assert x.cpu().tolist() == [0.0] * 5, "capturing ran the work"
    g.replay()
    g.replay()
    torch.accelerator.synchronize()
    assert x.cpu().tolist() == [2.0] * 5


def check_static_inputs(dev):
    """New values copied into the static input give eager's output after a replay."""
    torch.manual_seed(0)
    w = torch.randn(16, 8, device=dev)
    static_x = torch.randn(4, 16, device=dev)
    (static_x @ w).relu()  # warm-up outside the capture, as with CUDA graphs
    stream, g = torch.Stream(device=dev), torch.accelerator.Graph()
    with stream, g:
        static_y = (static_x @ w).relu().sum(1)
    for _ in range(3):
        x = torch.randn(4, 16, device=dev)
        static_x.copy_(x)
        g.replay()
        torch.accelerator.synchronize()
        torch.testing.assert_close(static_y.cpu(), (x @ w).relu().sum(1).cpu())


def check_random_ops_advance(dev):
    """Random ops in a graph draw new numbers on every replay."""
    x = torch.ones(1024, device=dev)
    stream, g = torch.Stream(device=dev), torch.accelerator.Graph()
    with stream, g:
        y = torch.nn.functional.dropout(x, 0.5)
    g.replay()
    torch.accelerator.synchronize()
    first = y.cpu().clone()
    g.replay()
    torch.accelerator.synchronize()
    assert not torch.equal(first, y.cpu()), "two replays drew the same dropout mask"
    assert 0.4 < (first == 0).float().mean() < 0.6
