"""A plain distributed program, as a user writes it for torchrun: it imports
torch and torch.distributed only. Emu's c10d backend comes from autoload.

    python -m torch.distributed.run --nproc-per-node 2 tests/_dist_plain_script.py MODE

MODE: ``plain`` (init_process_group()), ``device_id``
(init_process_group(device_id=emu:<rank>)), ``fsdp2`` and ``tp`` (a tiny MLP
trained on init_device_mesh("emu", (world,)) with fully_shard, or with
ColwiseParallel/RowwiseParallel, compared with the same training in this
process on CPU). Exits non-zero with a traceback on any mismatch.
"""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(seconds=30)
STEPS = 3


def check_init(mode: str) -> None:
    rank = int(os.environ["RANK"])
    torch.emu.set_device(rank)
    if mode == "plain":
        dist.init_process_group(timeout=TIMEOUT)
    else:
        dist.init_process_group(device_id=torch.device("emu", rank), timeout=TIMEOUT)
        assert dist.get_backend() == "emu_gloo", dist.get_backend()
    world = dist.get_world_size()
    t = torch.full((3,), float(rank + 1), device="emu")
    dist.all_reduce(t)
    assert t.device == torch.device("emu", rank)
    assert torch.equal(t.cpu(), torch.full((3,), world * (world + 1) / 2)), t
    # a subgroup and a group this rank is not a member of (with device_id,
    # c10d takes its split path through the bound device's backend)
    sub = dist.new_group(list(range(world)))
    dist.all_reduce(t, group=sub)
    alone = dist.new_group([0])
    if rank == 0:
        dist.all_reduce(t, group=alone)
    assert torch.equal(t.cpu(), torch.full((3,), world * world * (world + 1) / 2)), t
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(world)], objs
    dist.barrier()
    dist.destroy_process_group()


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def data():
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)) for _ in range(STEPS)]


def train(model, batches, shard=None):
    """SGD on the mean squared error; ``shard(x)`` picks this rank's rows."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches:
        if shard is not None:
            x, y = shard(x), shard(y)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model


def check_parallel(mode: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    world = int(os.environ["WORLD_SIZE"])
    mesh = init_device_mesh("emu", (world,))  # initialises the default group itself
    rank = dist.get_rank()
    assert dist.is_initialized() and dist.get_world_size() == world
    assert torch.emu.current_device() == rank  # DeviceMesh sets it from LOCAL_RANK
    torch.manual_seed(0)
    reference = MLP()
    model = MLP()
    model.load_state_dict(reference.state_dict())
    train(reference, data())  # one process, CPU, full batch

    model.to("emu")
    if mode == "fsdp2":
        fully_shard(model.up, mesh=mesh)
        fully_shard(model, mesh=mesh)
        rows = 8 // world
        train(model, [(x.to("emu"), y.to("emu")) for x, y in data()],
              shard=lambda t: t[rank * rows:(rank + 1) * rows])
    else:
        parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
        train(model, [(x.to("emu"), y.to("emu")) for x, y in data()])

    for name, p in model.named_parameters():
        assert isinstance(p, DTensor) and p.device.type == "emu", (name, type(p), p.device)
        full = p.full_tensor().cpu()
        ref = dict(reference.named_parameters())[name].detach()
        torch.testing.assert_close(full, ref, rtol=1.3e-6, atol=1e-5, msg=f"{mode} {name}")
    dist.destroy_process_group()


if __name__ == "__main__":
    mode = sys.argv[1]
    (check_init if mode in ("plain", "device_id") else check_parallel)(mode)
    print(f"OK {mode} rank {os.environ['RANK']}", flush=True)
