"""torch.distributed has a default backend for the device whose collectives run on device tensors (one rank)."""

import socket

import torch
import torch.distributed as dist

TIER = "distributed"
CHAPTER = "distributed"
ORDER = 140


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_default_backend(dev):
    """torch.distributed maps the device type to a registered process-group backend."""
    assert dist.is_available()
    backend = dist.Backend.default_device_backend_map.get(dev)
    assert backend, f"no default c10d backend for {dev!r}: {dist.Backend.default_device_backend_map}"


def check_single_rank_collectives(dev):
    """With world size 1, all_reduce, broadcast, all_gather and barrier run on device tensors in place."""
    store = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True)
    dist.init_process_group(device_id=torch.device(dev, 0), store=store, rank=0, world_size=1)
    try:
        x = torch.arange(4.0, device=dev)
        dist.all_reduce(x)
        assert x.device.type == dev and x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
        dist.broadcast(x, src=0)
        out = [torch.empty(4, device=dev)]
        dist.all_gather(out, x * 2)
        assert out[0].cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
        dist.barrier()
    finally:
        dist.destroy_process_group()
