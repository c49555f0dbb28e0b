"""Graph benchmark of torch-emu: small-op-heavy work replayed from an emu graph
vs the same work run eagerly on emu vs eagerly on CPU, in the same run.

    .venv/bin/python benchmarks/bench_graphs.py [--quick] [--json PATH]

Two workloads whose time is per-op overhead: 50 small elementwise ops on a
64-element tensor, and the training step (forward, backward, SGD step) of a
small MLP on a batch of 8. A replay skips Python, autograd and the
dispatcher and re-runs the recorded kernels only. Measurement as in
bench_foundation.py.
"""

import copy
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_foundation import bench, finish, machine_info, no_sync, parse_args, row, sync_emu  # noqa: E402


def elementwise(x):
    for i in range(10):
        x = (x * 1.01 + 0.1).relu().sin().add_(i).tanh()
    return x


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def training_step(model, opt, x, y):
    def step():
        opt.zero_grad(set_to_none=False)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def graphed(fn) -> torch.emu.EmuGraph:
    """fn captured after warm-up on a side stream (the CUDA recipe)."""
    side = torch.emu.Stream()
    with torch.emu.stream(side):
        for _ in range(3):
            fn()
    torch.emu.current_stream().wait_stream(side)
    g = torch.emu.EmuGraph()
    with torch.emu.graph(g):
        fn()
    return g


def cases_for(name: str, make_fn) -> dict:
    """name -> (emu eager, emu replay, cpu eager) cases; make_fn(device) -> fn."""
    eager_emu = make_fn("emu")
    replayed = graphed(make_fn("emu")).replay
    return {"emu eager": (eager_emu, sync_emu), "emu graph replay": (replayed, sync_emu),
            "cpu eager": (make_fn("cpu"), no_sync)}


def elementwise_on(device):
    x = torch.randn(64, device=device)
    return lambda: elementwise(x)


def mlp_step_on(device):
    model = copy.deepcopy(mlp()).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 32, generator=g).to(device), torch.randint(0, 10, (8,), generator=g).to(device)
    return training_step(model, opt, x, y)


def main() -> int:
    args = parse_args(__doc__.split("\n\n")[0])
    machine = machine_info(args.quick)
    start = time.perf_counter()
    number, repeats = (5, 3) if args.quick else (30, 7)
    rows, notes = [], []
    for name, make_fn in (("50 elementwise ops", elementwise_on), ("MLP training step", mlp_step_on)):
        t = bench(name, cases_for(name, make_fn), number=number, repeats=repeats, warmup=3)
        cpu = t["cpu eager"] * 1e6
        for case in ("emu eager", "emu graph replay"):
            rows.append(row(f"{name}, {case}", "µs/step", t[case] * 1e6, cpu, t[case] * 1e6 / cpu))
        notes.append(f"{name}: replay takes {t['emu graph replay'] / t['emu eager']:.2f}× the time of emu eager.")
    return finish(args, start, machine, rows, notes="\n" + "\n".join(notes))


if __name__ == "__main__":
    raise SystemExit(main())
