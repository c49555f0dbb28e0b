"""Mixed-precision benchmark of torch-emu: the time of one training step under
autocast on an emu device, compared with the same step under autocast on CPU.

    .venv/bin/python benchmarks/bench_amp.py [--quick] [--json PATH]

Same MLP, data and optimizer on both devices, in one process: float32 (the
reference), autocast bfloat16, and autocast float16 with a GradScaler (the
CUDA recipe; on CPU, torch.amp.GradScaler("cpu")). Prints a Markdown table of
emu/CPU time ratios (< 1: emu is faster) and, per device, how the AMP step
compares with its float32 step. Measurement as in bench_foundation.py: warm-up,
emu and CPU alternating inside every repeat, device synchronised before the
clock is read, median of the repeats.
"""

import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_foundation import bench, finish, machine_info, no_sync, parse_args, row, sync_emu  # noqa: E402

MODES = {
    "float32": (None, False),
    "autocast bfloat16": (torch.bfloat16, False),
    "autocast float16 + GradScaler": (torch.float16, True),
}


def make_step(device: str, net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, dtype, scaled: bool):
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9, foreach=False)
    scaler = torch.amp.GradScaler(device, enabled=scaled)
    x, y = x.to(device), y.to(device)

    def step():
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step


def bench_modes(quick: bool) -> tuple[list, dict]:
    torch.manual_seed(0)
    base = torch.nn.Sequential(
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    x, y = torch.randn(64, 512), torch.randint(0, 10, (64,))
    number, repeats = (5, 3) if quick else (20, 9)
    rows, times = [], {}
    for mode, (dtype, scaled) in MODES.items():
        steps = {device: make_step(device, copy.deepcopy(base).to(device), x, y, dtype, scaled)
                 for device in ("emu", "cpu")}
        t = bench(mode, {"emu": (steps["emu"], sync_emu), "cpu": (steps["cpu"], no_sync)},
                  number, repeats, warmup=5)
        times[mode] = t
        rows.append(row(f"MLP train step, {mode}", "ms/step", t["emu"] * 1e3, t["cpu"] * 1e3,
                        t["emu"] / t["cpu"]))
    return rows, times


def main() -> int:
    args = parse_args(__doc__.split("\n\n")[0])
    machine = machine_info(args.quick)
    start = time.perf_counter()
    rows, times = bench_modes(args.quick)
    fp32 = times["float32"]
    notes = ["\nAMP step time / float32 step time, per device:\n",
             "| mode | emu | CPU |\n|---|---:|---:|"]
    notes += [f"| {mode} | {t['emu'] / fp32['emu']:.2f}× | {t['cpu'] / fp32['cpu']:.2f}× |"
              for mode, t in times.items() if mode != "float32"]
    return finish(args, start, machine, rows, notes="\n".join(notes), gap_before_warning=True,
                  intro="MLP 512→512→512→10, batch 64, cross-entropy, SGD with momentum (foreach=False).\n")


if __name__ == "__main__":
    raise SystemExit(main())
