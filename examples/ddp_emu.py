"""DDP on emu devices, one process per device, Gloo as the transport.

    python -m torch.distributed.run --standalone --nproc-per-node 2 examples/ddp_emu.py

Each rank trains the same small MLP on its shard of every batch on
``emu:<local rank>``; DistributedDataParallel averages the gradients with the
``emu_gloo`` backend (the default backend of emu devices, registered by
``import torch``), so the replicas stay identical. Across machines, run the
same command on every node with ``--nnodes N --node-rank I
--rdzv-backend c10d --rdzv-endpoint HOST:PORT`` (see docs/guide/distributed.md).
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


# LITERALINCLUDE START: DDP_EXAMPLE
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32, help="per-rank batch size")
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])  # set by torchrun
    device = torch.device("emu", local_rank % torch.emu.device_count())
    torch.emu.set_device(device)
    # env:// rendezvous (RANK, WORLD_SIZE, MASTER_ADDR/PORT from torchrun); the
    # backend of emu devices, emu_gloo, is registered by `import torch` (autoload)
    dist.init_process_group(device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(device)
    model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    data = torch.Generator().manual_seed(1234 + rank)  # each rank its own shard
    for step in range(args.steps):
        x = torch.randn(args.batch, 32, generator=data).to(device)
        y = torch.randint(0, 10, (args.batch,), generator=data).to(device)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()  # gradients are all-reduced over emu_gloo here
        opt.step()
        if rank == 0 and (step % 5 == 0 or step == args.steps - 1):
            print(f"step {step}: loss {loss.item():.4f}", flush=True)

    # every replica holds the same parameters
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(copies, flat)
    same = all(torch.equal(c.cpu(), flat.cpu()) for c in copies)
    if rank == 0:
        print(f"world size {world}, replicas identical: {same}", flush=True)
    dist.destroy_process_group()
# LITERALINCLUDE END: DDP_EXAMPLE


if __name__ == "__main__":
    main()
