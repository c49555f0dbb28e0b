"""torch.distributed has a default backend for the device; collectives and DDP run on device tensors (1 and 2 ranks)."""

import json
import os
import pathlib
import runpy
import socket
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TIER = "distributed"
CHAPTER = "distributed"
ORDER = 140
WORLD = 2
PG_TIMEOUT = timedelta(seconds=30)  # a collective waiting for a dead rank fails, it does not hang
JOIN_TIMEOUT = 120.0  # the ranks' whole life, starting their interpreters included
RANK_RUN = "__conformance_rank__"  # the run name under which a rank process runs this file
# Set by the worker to the --import modules: the spawned ranks import only torch by themselves.
IMPORTS_ENV = "TORCH_CONFORMANCE_IMPORTS"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_backend(dev):
    backend = dist.is_available() and dist.Backend.default_device_backend_map.get(dev)
    assert backend, (f"no torch.distributed backend is registered for device {dev!r} (torch.distributed."
                     f"Backend.default_device_backend_map: {dist.Backend.default_device_backend_map})")
    return backend


def check_default_backend(dev):
    """torch.distributed maps the device type to a registered process-group backend."""
    return f"default backend: {default_backend(dev)}"


def check_single_rank_collectives(dev):
    """With world size 1, all_reduce, broadcast, all_gather and barrier run on device tensors in place."""
    default_backend(dev)
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


# LITERALINCLUDE START: RUN_RANKS
def run_ranks(dev, scenario, folder):
    """Runs ``scenario`` in WORLD spawned processes (one rank each) and fails with the first rank's
    error. A rank's target is runpy.run_path on this file: this module was loaded by path under a
    private name, which a spawned process could not import to find a function of it."""
    default_backend(dev)  # without one, init_process_group would have nothing to run on the device
    ctx = mp.get_context("spawn")
    port = free_port()
    ranks = [ctx.Process(target=runpy.run_path, args=(__file__, {"RANK_ARGS": (scenario, dev, rank, port, folder)},
                                                        RANK_RUN)) for rank in range(WORLD)]
    for p in ranks:
        p.start()
    deadline = time.monotonic() + JOIN_TIMEOUT
    for p in ranks:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [rank for rank, p in enumerate(ranks) if p.is_alive()]
    for rank in hung:
        ranks[rank].kill()
        ranks[rank].join()
    errors = {int(f.stem[4:]): f.read_text() for f in sorted(pathlib.Path(folder).glob("rank*.error"))}
    assert not errors, "; ".join(f"rank {rank}: {error}" for rank, error in errors.items())
    assert not hung, f"rank(s) {hung} did not finish within {JOIN_TIMEOUT:g} s"
    bad = [(rank, p.exitcode) for rank, p in enumerate(ranks) if p.exitcode != 0]
    assert not bad, f"rank(s) exited with {bad}"
# LITERALINCLUDE END: RUN_RANKS


def check_two_rank_collectives(dev):
    """Two spawned ranks: all_reduce, broadcast, all_gather, reduce_scatter and send/recv on device tensors agree."""
    with tempfile.TemporaryDirectory() as folder:
        run_ranks(dev, "collectives", folder)


def check_two_rank_ddp(dev):
    """A DDP step on two ranks gives the parameters of one process's step on the concatenated batch."""
    with tempfile.TemporaryDirectory() as folder:
        run_ranks(dev, "ddp", folder)
        model, (x, y) = ddp_model(), ddp_batch()
        step(model.to(dev), x.to(dev), y.to(dev))  # the reference: this process, the whole batch
        for rank in range(WORLD):
            got = json.loads((pathlib.Path(folder) / f"rank{rank}.json").read_text())
            for (name, p), q in zip(model.named_parameters(), got):
                torch.testing.assert_close(torch.tensor(q), p.detach().cpu(), msg=lambda m: f"rank {rank}, {name}: {m}")


def ddp_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def ddp_batch():
    gen = torch.Generator().manual_seed(1)
    return torch.randn(8, 4, generator=gen), torch.randn(8, 2, generator=gen)


def step(model, x, y):
    optim = torch.optim.SGD(model.parameters(), lr=0.5)
    torch.nn.functional.mse_loss(model(x), y).backward()
    optim.step()


# --- In the rank processes -------------------------------------------------------------------------

def rank_collectives(dev, rank):
    def expect(t, values, what):
        assert t.device.type == dev, f"{what}: result on {t.device}"
        assert t.cpu().tolist() == values, f"{what}: {t.cpu().tolist()} != {values}"

    x = torch.full((3,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    expect(x, [3.0] * 3, "all_reduce")
    x = torch.arange(3.0, device=dev) + 10 * rank
    dist.broadcast(x, src=1)
    expect(x, [10.0, 11.0, 12.0], "broadcast")
    out = [torch.empty(2, device=dev) for _ in range(WORLD)]
    dist.all_gather(out, torch.full((2,), float(rank), device=dev))
    for r in range(WORLD):
        expect(out[r], [float(r)] * 2, f"all_gather[{r}]")
    out = torch.empty(2, device=dev)
    dist.reduce_scatter(out, [torch.full((2,), float(10 * r + rank), device=dev) for r in range(WORLD)])
    expect(out, [float(20 * rank + 1)] * 2, "reduce_scatter")  # 10*rank + 0 from rank 0, + 1 from rank 1
    if rank == 0:
        dist.send(torch.arange(4.0, device=dev), dst=1)
        back = torch.empty(4, device=dev)
        dist.recv(back, src=1)
        expect(back, [0.0, -1.0, -2.0, -3.0], "recv on rank 0")
    else:
        got = torch.empty(4, device=dev)
        dist.recv(got, src=0)
        expect(got, [0.0, 1.0, 2.0, 3.0], "recv on rank 1")
        dist.send(-got, dst=0)


def rank_ddp(dev, rank, folder):
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(ddp_model().to(dev))
    x, y = ddp_batch()
    half = len(x) // WORLD
    step(model, x[rank * half:(rank + 1) * half].to(dev), y[rank * half:(rank + 1) * half].to(dev))
    params = [p.detach().cpu().tolist() for p in model.module.parameters()]
    (pathlib.Path(folder) / f"rank{rank}.json").write_text(json.dumps(params))


def rank_main(scenario, dev, rank, port, folder):
    import importlib

    try:
        for name in filter(None, os.environ.get(IMPORTS_ENV, "").split(",")):
            importlib.import_module(name)  # the backend, when torch does not autoload it
        accelerator = torch.accelerator.current_accelerator()
        count = torch.accelerator.device_count() if accelerator else 0
        if getattr(accelerator, "type", None) != dev or not count:
            raise RuntimeError(f"the rank process has no {dev!r} device (not autoloaded, and no --import names it)")
        device = torch.device(dev, rank % count)
        dist.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                                timeout=PG_TIMEOUT, device_id=device)
        try:
            rank_collectives(dev, rank) if scenario == "collectives" else rank_ddp(dev, rank, folder)
        finally:
            dist.destroy_process_group()
    except BaseException as e:
        text = str(e).strip()
        (pathlib.Path(folder) / f"rank{rank}.error").write_text(
            f"{type(e).__name__}: {text.splitlines()[0] if text else ''}")
        raise


if __name__ == RANK_RUN:
    rank_main(*RANK_ARGS)  # noqa: F821 (given by runpy.run_path's init_globals)
