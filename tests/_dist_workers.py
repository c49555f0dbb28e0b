"""Worker programs for tests/test_distributed.py, one process per rank.

Run as ``python tests/_dist_workers.py SCENARIO`` with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT in the environment (the test launches them, or
torchrun does). A worker exits 0 on success; a failed check raises, so the
process exits non-zero with the traceback on stderr.
"""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import torch_emu
import torch_emu.distributed  # noqa: F401  (registers emu_gloo)

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
TIMEOUT = timedelta(seconds=float(os.environ.get("EMU_TEST_PG_TIMEOUT", "20")))


def _init(backend="emu_gloo", init_method=None):
    kwargs = {"backend": backend, "timeout": TIMEOUT}
    if init_method:
        kwargs.update(init_method=init_method, rank=RANK, world_size=WORLD)
    dist.init_process_group(**kwargs)
    if os.environ.get("EMU_TEST_EXPECT_STRICT") == "1":
        assert torch_emu._C._strict_mode() and dist.group.WORLD._strict
    torch.emu.set_device(RANK % torch.emu.device_count())
    return torch.device("emu", RANK % torch.emu.device_count())


def _eq(a, b, what):
    a = a.cpu() if isinstance(a, torch.Tensor) else a
    b = b.cpu() if isinstance(b, torch.Tensor) else b
    if not torch.equal(a, b):
        raise AssertionError(f"rank {RANK} {what}: emu {a} != gloo {b}")


# -- collectives, compared with Gloo on CPU tensors -------------------------


def _both(dev, cpu_pg, fn, *tensors):
    """Runs fn(tensors, group) on emu copies (default group) and on CPU
    copies (a plain Gloo group); returns both results."""
    emu = [t.to(dev) if isinstance(t, torch.Tensor) else [x.to(dev) for x in t] for t in tensors]
    cpu = [t.clone() if isinstance(t, torch.Tensor) else [x.clone() for x in t] for t in tensors]
    fn(*emu, group=None)
    fn(*cpu, group=cpu_pg)
    return emu, cpu


def _cmp(emu, cpu, what):
    for e, c in zip(emu, cpu):
        if isinstance(e, torch.Tensor):
            _eq(e, c, what)
        else:
            for x, y in zip(e, c):
                _eq(x, y, what)


def collectives(init_method=None, backend="emu_gloo"):
    dev = _init(backend, init_method)
    cpu_pg = dist.new_group(backend="gloo")
    r, w = RANK, WORLD
    g = torch.Generator().manual_seed(1234 + r)
    fdata = torch.randn(6, 5, generator=g)
    idata = torch.randint(1, 50, (17,), generator=g, dtype=torch.int64)

    ops = {
        "SUM": [fdata, idata], "PRODUCT": [fdata, idata], "MIN": [fdata, idata], "MAX": [fdata, idata],
        "BAND": [idata], "BOR": [idata], "BXOR": [idata],
    }
    for name, datas in ops.items():
        for data in datas:
            op = getattr(dist.ReduceOp, name)
            emu, cpu = _both(dev, cpu_pg, lambda t, group: dist.all_reduce(t, op=op, group=group), data)
            _cmp(emu, cpu, f"all_reduce {name} {data.dtype}")
            emu, cpu = _both(dev, cpu_pg, lambda t, group: dist.reduce(t, dst=w - 1, op=op, group=group), data)
            if r == w - 1:
                _cmp(emu, cpu, f"reduce {name} {data.dtype}")

    # AVG: Gloo has no AVG; emu_gloo runs SUM and divides on the device.
    t = fdata.to(dev)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    ref = fdata.clone()
    dist.all_reduce(ref, group=cpu_pg)
    torch.testing.assert_close(t.cpu(), ref / w, rtol=0, atol=0)

    for src in range(w):
        emu, cpu = _both(dev, cpu_pg, lambda t, group: dist.broadcast(t, src=src, group=group), fdata)
        _cmp(emu, cpu, "broadcast")

    outs = [torch.empty_like(fdata) for _ in range(w)]
    emu, cpu = _both(dev, cpu_pg, lambda o, i, group: dist.all_gather(o, i, group=group), outs, fdata)
    _cmp(emu, cpu, "all_gather")

    out = torch.empty(w * 6, 5)
    emu, cpu = _both(dev, cpu_pg, lambda o, i, group: dist.all_gather_into_tensor(o, i, group=group), out, fdata)
    _cmp(emu, cpu, "all_gather_into_tensor")

    outs = [torch.zeros_like(idata) for _ in range(w)] if r == 0 else []
    emu = [o.to(dev) for o in outs]
    dist.gather(idata.to(dev), emu, dst=0)
    cpu = [o.clone() for o in outs]
    dist.gather(idata, cpu, dst=0, group=cpu_pg)
    _cmp([emu], [cpu], "gather")

    scat = [torch.arange(4.0) + 10 * i + 100 * r for i in range(w)]
    o_emu, o_cpu = torch.zeros(4, device=dev), torch.zeros(4)
    dist.scatter(o_emu, [x.to(dev) for x in scat] if r == 1 % w else None, src=1 % w)
    dist.scatter(o_cpu, scat if r == 1 % w else None, src=1 % w, group=cpu_pg)
    _eq(o_emu, o_cpu, "scatter")

    ins = [torch.randn(3, generator=g) for _ in range(w)]
    emu, cpu = _both(dev, cpu_pg, lambda o, i, group: dist.reduce_scatter(o, i, group=group), torch.zeros(3), ins)
    _cmp(emu, cpu, "reduce_scatter")

    big = torch.randn(w * 4, generator=g)
    emu, cpu = _both(dev, cpu_pg, lambda o, i, group: dist.reduce_scatter_tensor(o, i, group=group), torch.zeros(4), big)
    _cmp(emu, cpu, "reduce_scatter_tensor")

    ins = [torch.full((2,), float(10 * r + i)) for i in range(w)]
    outs = [torch.zeros(2) for _ in range(w)]
    emu, cpu = _both(dev, cpu_pg, lambda o, i, group: dist.all_to_all(o, i, group=group), outs, ins)
    _cmp(emu, cpu, "all_to_all")

    inp = torch.arange(w * 3, dtype=torch.float32) + 100 * r
    emu, cpu = _both(dev, cpu_pg, lambda o, i, group: dist.all_to_all_single(o, i, group=group), torch.zeros(w * 3), inp)
    _cmp(emu, cpu, "all_to_all_single")
    # uneven splits: rank r sends r+1+i elements to rank i
    in_splits = [r + 1 + i for i in range(w)]
    out_splits = [i + 1 + r for i in range(w)]
    inp = torch.arange(sum(in_splits), dtype=torch.float32) + 1000 * r

    def a2a_uneven(o, i, group):
        dist.all_to_all_single(o, i, out_splits, in_splits, group=group)

    emu, cpu = _both(dev, cpu_pg, a2a_uneven, torch.zeros(sum(out_splits)), inp)
    _cmp(emu, cpu, "all_to_all_single uneven")

    dist.barrier()

    # point to point: a ring
    nxt, prv = (r + 1) % w, (r - 1) % w
    send = (torch.arange(5.0) + r).to(dev)
    recv = torch.zeros(5, device=dev)
    if r % 2 == 0:
        dist.send(send, nxt)
        dist.recv(recv, prv)
    else:
        dist.recv(recv, prv)
        dist.send(send, nxt)
    _eq(recv, torch.arange(5.0) + prv, "send/recv")
    recv.zero_()
    reqs = [dist.isend(send, nxt), dist.irecv(recv, prv)]
    for q in reqs:
        q.wait()
    _eq(recv, torch.arange(5.0) + prv, "isend/irecv")
    recv.zero_()
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)])
    for q in reqs:
        q.wait()
    _eq(recv, torch.arange(5.0) + prv, "batch_isend_irecv")

    dist.destroy_process_group()


# -- asynchronous work and stream ordering ----------------------------------


def async_streams():
    dev = _init()
    r, w = RANK, WORLD
    # Prior device work on a side stream, made current: an asynchronous
    # pinned copy that must land before the collective reads the tensor.
    host = torch.full((1 << 20,), float(r + 1)).pin_memory()
    side = torch.emu.Stream(dev)
    with torch.emu.stream(side):
        t = torch.empty(1 << 20, device=dev)
        t.copy_(host, non_blocking=True)
        work = dist.all_reduce(t, async_op=True)
        assert isinstance(work, dist.Work)
        work.wait()
        y = t * 2  # queued on the current stream after wait(): sees the sum
    side.synchronize()
    expected = float(sum(range(1, w + 1)))
    assert torch.all(y.cpu() == 2 * expected), y
    # the future delivers the emu tensors themselves
    t2 = torch.ones(8, device=dev)
    fut = dist.all_reduce(t2, async_op=True).get_future()
    val = fut.wait()
    assert val[0].device == dev and val[0].data_ptr() == t2.data_ptr(), val
    assert torch.all(t2.cpu() == w)
    # many outstanding works, waited for in reverse order
    ts = [torch.full((1000,), float(i + r), device=dev) for i in range(8)]
    works = [dist.all_reduce(x, async_op=True) for x in ts]
    for x in reversed(works):
        x.wait()
    for i, x in enumerate(ts):
        assert torch.all(x.cpu() == sum(i + k for k in range(w))), (i, x)
    assert works[0].is_completed()
    dist.destroy_process_group()


# -- training ------------------------------------------------------------------


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def _batches(steps, per_rank, world):
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(world * per_rank, 16, generator=g), torch.randn(world * per_rank, 4, generator=g))
            for _ in range(steps)]


class _SlowForward(torch.nn.Module):
    """Keeps the stream busy for a while in forward (torch.emu._sleep, a kernel that takes
    its time), and returns at once."""

    SECONDS = 0.02

    def forward(self, x):
        torch.emu._sleep(int(self.SECONDS * 1e9))  # 1 GHz: the device's clock_rate is 0
        return x


def ddp():
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _init()
    r, w = RANK, WORLD
    steps, per_rank = 5, 8
    data = _batches(steps, per_rank, w)
    model = DDP(torch.nn.Sequential(_SlowForward(), _model()).to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in data:
        xs, ys = x[r * per_rank:(r + 1) * per_rank].to(dev), y[r * per_rank:(r + 1) * per_rank].to(dev)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        opt.step()
    # DDP's runtime stats time the device's work, not the host's queuing of it.
    forward_ns = model._get_ddp_logging_data()["avg_forward_compute_time"]
    assert forward_ns >= _SlowForward.SECONDS * 1e9, forward_ns
    # reference: one process, the whole (concatenated) batch, on the same device
    ref = _model().to(dev)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for x, y in data:
        ropt.zero_grad()
        torch.nn.functional.mse_loss(ref(x.to(dev)), y.to(dev)).backward()
        ropt.step()
    for (name, p), q in zip(model.module.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=1e-5, atol=1e-6, msg=name)
    # replicas are bit-identical across ranks
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(w)]
    dist.all_gather(gathered, flat)
    for other in gathered:
        assert torch.equal(other.cpu(), flat.cpu())
    dist.destroy_process_group()


def _train_fsdp(make, data, dev, shard, steps_lr=0.05):
    """Trains make() with FSDP2 on this rank's shard of each batch and, for
    reference, unsharded on the whole batch; returns both models."""
    from torch.distributed.fsdp import fully_shard

    r, w = RANK, WORLD
    model = make().to(dev)
    for m in shard(model):
        fully_shard(m)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=steps_lr, momentum=0.9)
    ref = make().to(dev)
    ropt = torch.optim.SGD(ref.parameters(), lr=steps_lr, momentum=0.9)
    for x, y in data:
        n = x.shape[0] // w
        xs, ys = x[r * n:(r + 1) * n].to(dev), y[r * n:(r + 1) * n].to(dev)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        opt.step()
        ropt.zero_grad()
        torch.nn.functional.mse_loss(ref(x.to(dev)), y.to(dev)).backward()
        ropt.step()
    return model, ref


def _full_params(model):
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu()
            for k, v in model.state_dict().items()}


def _assert_same_params(model, ref, rtol, atol):
    full = _full_params(model)
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(full[k], v.detach().cpu(), rtol=rtol, atol=atol, msg=k)


def fsdp2():
    import tempfile

    import torch.distributed.checkpoint as dcp

    # DCP exchanges its plans with object collectives; "cpu:gloo" carries
    # those on CPU tensors, as is usual for checkpointing.
    backend = "cpu:gloo,emu:emu_gloo"
    dev = _init(backend)
    w = WORLD

    # an MLP, one FSDP unit per Linear
    data = _batches(4, 8, w)
    mlp, ref = _train_fsdp(_model, data, dev, lambda m: [x for x in m if isinstance(x, torch.nn.Linear)])
    _assert_same_params(mlp, ref, rtol=1e-5, atol=1e-6)

    # a transformer block
    def block():
        torch.manual_seed(0)
        return torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                                batch_first=True)

    g = torch.Generator().manual_seed(3)
    tdata = [(torch.randn(4 * w, 6, 32, generator=g), torch.randn(4 * w, 6, 32, generator=g)) for _ in range(3)]
    blk, bref = _train_fsdp(block, tdata, dev, lambda m: [m.self_attn, m.linear1, m.linear2])
    _assert_same_params(blk, bref, rtol=1e-4, atol=1e-5)

    # distributed checkpoint: save the sharded state, load it into a fresh sharded model
    from torch.distributed.fsdp import fully_shard

    path = [tempfile.mkdtemp(prefix="emu_dcp_")] if RANK == 0 else [None]
    dist.broadcast_object_list(path, src=0)
    dcp.save(blk.state_dict(), checkpoint_id=path[0])
    fresh = block()
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh = fresh.to(dev)
    for m in [fresh.self_attn, fresh.linear1, fresh.linear2]:
        fully_shard(m)
    fully_shard(fresh)
    state = fresh.state_dict()
    dcp.load(state, checkpoint_id=path[0])
    fresh.load_state_dict(state)
    _assert_same_params(fresh, bref, rtol=1e-4, atol=1e-5)
    for a, b in zip(fresh.parameters(), blk.parameters()):
        assert torch.equal(a.to_local().cpu(), b.to_local().cpu())
    dist.barrier()
    if RANK == 0:
        import shutil

        shutil.rmtree(path[0], ignore_errors=True)
    dist.destroy_process_group()


# -- faults --------------------------------------------------------------------


def _exit_by_outcome(*calls):
    """Runs ``calls`` in order: if one raises, prints how long it took and what
    was raised, and exits 3; otherwise exits 0."""
    start = time.monotonic()
    try:
        for call in calls:
            call()
    except Exception as e:  # noqa: BLE001
        print(f"RAISED after {time.monotonic() - start:.1f}s: {type(e).__name__}: {e}"[:400], flush=True)
        os._exit(3)
    os._exit(0)


def dies():
    """Rank 1 exits after init; rank 0's next collective must raise."""
    dev = _init()
    t = torch.ones(4, device=dev)
    dist.all_reduce(t)
    if RANK == 1:
        os._exit(0)
    time.sleep(0.5)
    _exit_by_outcome(lambda: dist.all_reduce(t), lambda: dist.all_reduce(t))


def device_lost():
    """DDP training; at step 2, rank 1's device is lost (an injected fault):
    rank 1 must raise torch.AcceleratorError, rank 0 its next collective."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _init()
    model = DDP(_model().to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train():
        for step, (x, y) in enumerate(_batches(6, 8, WORLD)):
            if step == 2 and RANK == 1:
                torch.emu.faults.inject("device_lost")
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
            opt.step()

    _exit_by_outcome(train)


def stalls():
    """Rank 1 stays alive but skips the collective: rank 0 must time out."""
    dev = _init()
    t = torch.ones(4, device=dev)
    dist.all_reduce(t)
    if RANK == 1:
        time.sleep(40)  # the test kills this process once rank 0 has finished
        os._exit(0)
    _exit_by_outcome(lambda: dist.all_reduce(t))


def never_joins():
    """Only rank 0 is started: init_process_group must time out."""
    start = time.monotonic()
    try:
        _init()
    except Exception as e:  # noqa: BLE001
        print(f"RAISED after {time.monotonic() - start:.1f}s: {type(e).__name__}", flush=True)
        sys.exit(3)
    sys.exit(0)


def wrong_inputs():
    dev = _init()
    errors = []
    try:
        dist.all_reduce(torch.ones(3))
    except ValueError as e:
        errors.append(str(e))
    try:
        dist.all_gather_into_tensor(torch.empty(WORLD * 3, device=dev), torch.ones(4, device=dev))
    except Exception as e:  # noqa: BLE001
        errors.append(str(e))
    try:
        dist.all_gather_into_tensor(torch.empty(WORLD * 3, device=dev, dtype=torch.int64), torch.ones(3, device=dev))
    except ValueError as e:
        errors.append(str(e))
    assert len(errors) == 3, errors
    assert "CPU tensor" in errors[0] and "emu_gloo" in errors[0], errors[0]
    assert "mixed dtypes" in errors[2], errors[2]
    print("ERRORS:", *errors, sep="\n", flush=True)
    # the group is still usable after the rejected calls
    t = torch.ones(2, device=dev)
    dist.all_reduce(t)
    assert torch.all(t.cpu() == WORLD)
    dist.destroy_process_group()


def mixed_backends():
    """cpu:gloo,emu:emu_gloo: CPU tensors and emu tensors in one group."""
    dev = _init("cpu:gloo,emu:emu_gloo")
    a, b = torch.ones(3), torch.ones(3, device=dev)
    dist.all_reduce(a)
    dist.all_reduce(b)
    assert torch.all(a == WORLD) and torch.all(b.cpu() == WORLD)
    # object collectives pick CPU in a mixed group
    objs = [None] * WORLD
    dist.all_gather_object(objs, {"rank": RANK})
    assert objs == [{"rank": i} for i in range(WORLD)], objs
    dist.destroy_process_group()


SCENARIOS = {f.__name__: f for f in [
    collectives, async_streams, ddp, fsdp2, dies, device_lost, stalls, never_joins, wrong_inputs, mixed_backends,
]}

if __name__ == "__main__":
    name = sys.argv[1]
    if name == "collectives_tcp":
        collectives(init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")
    else:
        SCENARIOS[name]()
