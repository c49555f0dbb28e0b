"""torch.compile benchmark of torch-emu: the time of one compiled training
step on an emu device, compared with the same compiled step on CPU.

    .venv/bin/python benchmarks/bench_compile.py [--quick] [--json PATH]

Three small models (an MLP, a CNN, a transformer encoder block), each trained
with forward, backward and an SGD step, and their compiled forward in
inference (no_grad, eval); the model and the optimizer step are compiled with
the default Inductor backend on each device. Prints a Markdown table of
compiled emu/CPU time ratios (target at most 1.0×) and of the eager steps, the
compiled/eager speed-up per device, and the cost of one generated kernel's
launch: a compiled function of one kernel on 8 floats, per call. Measurement as in
bench_foundation.py: warm-up (which also compiles), emu and CPU alternating
inside every repeat, device synchronised before the clock is read, median of
the repeats.
"""

import copy
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_foundation import bench, finish, machine_info, no_sync, parse_args, row, sync_emu  # noqa: E402

TARGET = 1.0  # compiled emu / compiled CPU, at most (issue 24: forward and training step)


def models() -> dict:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    cnn = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, 10),
    )
    block = nn.Sequential(
        nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, dropout=0.0, batch_first=True),
        nn.Flatten(), nn.Linear(32 * 128, 10),
    )
    return {
        "MLP 512→512→512→10, batch 64": (mlp, torch.randn(64, 512)),
        "CNN conv-bn-relu-pool ×2 + linear, 32×3×32×32": (cnn, torch.randn(32, 3, 32, 32)),
        "transformer block d=128, 4 heads, 16×32 tokens": (block, torch.randn(16, 32, 128)),
    }


def make_step(device: str, base: nn.Module, x: torch.Tensor, compiled: bool):
    net = copy.deepcopy(base).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    x, y = x.to(device), torch.randint(0, 10, (x.shape[0],), generator=torch.Generator().manual_seed(0)).to(device)
    # Static shapes: the models share nn.Sequential.forward, and a recompile
    # for another model would otherwise make Dynamo try dynamic shapes.
    forward = torch.compile(net, dynamic=False) if compiled else net
    update = torch.compile(opt.step, dynamic=False) if compiled else opt.step

    def step():
        loss = nn.functional.cross_entropy(forward(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        update()

    return step


def bench_forward(quick: bool) -> list:
    """The compiled forward of each model in inference, emu against CPU."""
    number, repeats = (3, 3) if quick else (20, 7)
    rows = []
    for name, (base, x) in models().items():
        torch._dynamo.reset()
        cases = {}
        for device, sync in (("emu", sync_emu), ("cpu", no_sync)):
            net, xd = copy.deepcopy(base).to(device).eval(), x.to(device)
            forward = torch.compile(net, dynamic=False)

            def run(forward=forward, xd=xd):
                with torch.no_grad():
                    forward(xd)
            cases[device] = (run, sync)
        t = bench(f"{name} forward", cases, number, repeats, warmup=2)
        rows.append(row(f"{name}: compiled forward", "ms", t["emu"] * 1e3, t["cpu"] * 1e3, t["emu"] / t["cpu"],
                        TARGET))
    return rows


def bench_launch(quick: bool) -> list:
    """One generated kernel per call (relu(x * 2 + 1) on 8 floats): the wrapper's
    and the launch's cost, emu against CPU."""
    torch._dynamo.reset()
    f = torch.compile(lambda x: (x * 2 + 1).relu(), dynamic=False)
    xs = {device: torch.randn(8, device=device) for device in ("emu", "cpu")}
    cases = {"emu": (lambda: f(xs["emu"]), sync_emu), "cpu": (lambda: f(xs["cpu"]), no_sync)}
    t = bench("one generated kernel", cases, 200 if quick else 2000, 3 if quick else 7, warmup=2)
    return [row("one generated kernel (8 floats), per call", "µs", t["emu"] * 1e6, t["cpu"] * 1e6,
                t["emu"] / t["cpu"])]


def bench_models(quick: bool) -> tuple[list, list]:
    number, repeats = (3, 3) if quick else (20, 7)
    rows, notes = [], ["\nSpeed-up of torch.compile per device: eager step time / compiled step time (> 1: compiled is faster):\n",
                       "| model | emu | CPU | compile time emu / CPU |", "|---|---:|---:|---:|"]
    for name, (base, x) in models().items():
        torch._dynamo.reset()  # each model starts with Dynamo's recompile budget unused
        times, compile_s = {}, {}
        for compiled in (True, False):
            steps = {device: make_step(device, base, x, compiled) for device in ("emu", "cpu")}
            if compiled:  # the first call compiles: time it apart from the warm-up
                for device, step in steps.items():
                    start = time.perf_counter()
                    step()
                    torch.emu.synchronize()
                    compile_s[device] = time.perf_counter() - start
            kind = "compiled" if compiled else "eager"
            t = bench(f"{name} {kind}", {"emu": (steps["emu"], sync_emu), "cpu": (steps["cpu"], no_sync)},
                      number, repeats, warmup=2)
            times[kind] = t
            rows.append(row(f"{name}: {kind}", "ms/step", t["emu"] * 1e3, t["cpu"] * 1e3, t["emu"] / t["cpu"],
                            TARGET if compiled else None))
        speedup = {d: times["eager"][d] / times["compiled"][d] for d in ("emu", "cpu")}
        notes.append(f"| {name} | {speedup['emu']:.2f}× | {speedup['cpu']:.2f}× "
                     f"| {compile_s['emu']:.1f} s / {compile_s['cpu']:.1f} s |")
    return rows, notes


def main() -> int:
    args = parse_args(__doc__.split("\n\n")[0])
    machine = machine_info(args.quick)
    start = time.perf_counter()
    torch._inductor.config.force_disable_caches = True  # compile times are real, not cache hits
    rows, notes = bench_models(args.quick)
    rows += bench_forward(args.quick) + bench_launch(args.quick)
    return finish(args, start, machine, rows, notes="\n".join(notes), gap_before_warning=True,
                  intro="Training step: cross-entropy, backward, SGD with momentum; "
                        "model and optimizer step compiled with the default Inductor backend.\n")


if __name__ == "__main__":
    raise SystemExit(main())
