"""The measurement behind the default launch rule: at once or queued, by size.

    .venv/bin/python benchmarks/bench_launch_rule.py [--quick] [--json PATH]

The default launch mode runs a kernel onto an idle stream at once when it
reads and writes at most 64 KiB, and queues it otherwise (run_at_once in
csrc/core/EmuLaunch.cpp). This benchmark shows where that line comes from:
back-to-back `a + b` and `a @ a` on float32 tensors of growing size, timed in
a process where every kernel onto an idle stream runs at once
(TORCH_EMU_LAUNCH_QUEUED=0), one where every kernel is queued (=1) and one
with the default rule, each against CPU measured in the same process. The
crossover is the size from which queued beats at once. Nothing is enforced.
"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_foundation import bench, finish, machine_info, no_sync, parse_args, row, run_in_child, serve_child, sync_emu  # noqa: E402

import torch_emu  # noqa: E402,F401

SIZES = (1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18)  # elements of each operand
MODES = {"default": {}, "at once": {"TORCH_EMU_LAUNCH_QUEUED": "0"}, "queued": {"TORCH_EMU_LAUNCH_QUEUED": "1"}}


def cases(n: int) -> dict:
    """name -> function of a device returning the op to time on it."""
    side = int(n ** 0.5)

    def add(device):
        a, b = torch.randn(n, device=device), torch.randn(n, device=device)
        return lambda: a + b

    def matmul(device):
        a = torch.randn(side, side, device=device)
        return lambda: a @ a

    kib = lambda k: f"{k * 4 >> 10} KiB"  # noqa: E731
    return {f"a + b, {n} floats (reads and writes {kib(3 * n)})": add,
            f"a @ a, {side}×{side} (reads and writes {kib(3 * side * side)})": matmul}


def measure(quick: bool) -> dict:
    """name -> {emu, cpu}: seconds per op, back to back."""
    results = {}
    for n in SIZES:
        for name, make in cases(n).items():
            number = max(50, (20_000 if quick else 200_000) // n)
            results[name] = bench(name, {"emu": (make("emu"), sync_emu), "cpu": (make("cpu"), no_sync)},
                                  number=number, repeats=3 if quick else 7, warmup=20)
    return results


def main() -> int:
    if serve_child(measure):
        return 0
    args = parse_args(__doc__.split("\n\n")[0])
    machine = machine_info(args.quick)
    start = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_EMU_LAUNCH_")}
    runs = {mode: run_in_child(__file__, {**env, **extra}, args.quick) for mode, extra in MODES.items()}
    rows, details = [], []
    for name in runs["default"]:
        r = runs["default"][name]
        rows.append(row(name, "µs/op", r["emu"] * 1e6, r["cpu"] * 1e6, r["emu"] / r["cpu"]))
        ratios = [runs[m][name]["emu"] / runs[m][name]["cpu"] for m in ("at once", "queued")]
        details.append(f"| {name} | {ratios[0]:.2f} | {ratios[1]:.2f} | "
                       f"{'queued' if ratios[1] < ratios[0] else 'at once'} |")
    notes = ("\nThe main table is the default rule. Each mode against CPU in its own process:\n\n"
             "| op | emu/CPU at once | emu/CPU queued | faster |\n|---|---:|---:|---|\n" + "\n".join(details))
    return finish(args, start, machine, rows, notes=notes, gap_before_warning=True)


if __name__ == "__main__":
    raise SystemExit(main())
