"""Device tensors passed to a spawned process share memory: its in-place writes are what the sender sees."""

import torch
import torch.multiprocessing as mp

TIER = "ipc"
CHAPTER = "ipc"
ORDER = 150


def run_in_child(method, *args):
    # A method of torch.Tensor as the target: the child needs no code of ours, only torch (and the
    # backend it autoloads) to rebuild the shared tensor from its IPC handle.
    p = mp.get_context("spawn").Process(target=method, args=args)
    p.start()
    p.join(120)
    assert p.exitcode == 0, f"the child process exited with {p.exitcode}"


def check_child_writes_shared_tensor(dev):
    """A spawned process adds to a device tensor in place; the sender sees the sum."""
    x = torch.zeros(1000, device=dev)
    run_in_child(torch.Tensor.add_, x, 1)
    assert x.sum().item() == 1000, "the child's write is not visible to the sender"


def check_shared_view(dev):
    """A view sent to a child addresses the same elements of the sender's storage, and no others."""
    base = torch.arange(10.0, device=dev)
    run_in_child(torch.Tensor.mul_, base[2:8:2], -1)
    assert base.cpu().tolist() == [0.0, 1.0, -2.0, 3.0, -4.0, 5.0, -6.0, 7.0, 8.0, 9.0], base.cpu().tolist()
