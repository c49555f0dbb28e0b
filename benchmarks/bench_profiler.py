"""Profiler benchmark of torch-emu: what recording a device trace costs per op.

    .venv/bin/python benchmarks/bench_profiler.py [--quick] [--json PATH]

A loop of small ops (add, mm, relu on 8×8 tensors: the time is almost all
per-op overhead) runs with no profiler, then inside torch.profiler.profile:
on emu with ProfilerActivity.CPU alone (PyTorch's own per-op cost), and on emu with
CPU and PrivateUse1 (adding the device trace: runtime records for every
kernel, the op-name callback, correlation ids). Target: the emu loop with
the device trace at most 2x the unprofiled one. Measurement as in bench_foundation.py.
"""

import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_foundation import bench, finish, machine_info, no_sync, parse_args, row, sync_emu  # noqa: E402

ON_OFF_TARGET = 2.0
OPS_PER_CALL = 3


def small_op_loop(device: str):
    a = torch.randn(8, 8).to(device)
    b = torch.randn(8, 8).to(device)

    def ops():
        torch.relu(torch.mm(torch.add(a, b), b))
    return ops


def measure(quick: bool) -> dict:
    """µs per op: {(device, profiler): time}, profiler "off", "cpu" (CPU
    activity only) or "trace" (emu: CPU and PrivateUse1 activities)."""
    number, repeats = (100, 3) if quick else (500, 5)
    cases = {"emu": (small_op_loop("emu"), sync_emu), "cpu": (small_op_loop("cpu"), no_sync)}
    off = bench("off", cases, number=number, repeats=repeats, warmup=50)
    times = {(d, "off"): off[d] for d in cases}
    # One session per measurement so that each records only its own ops.
    for device, profiler, activities in (
            ("emu", "cpu", [ProfilerActivity.CPU]),
            ("cpu", "cpu", [ProfilerActivity.CPU]),
            ("emu", "trace", [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1])):
        with profile(activities=activities):
            t = bench(f"{profiler} {device}", {device: cases[device]}, number=number, repeats=repeats, warmup=50)
        times[device, profiler] = t[device]
    return {k: v * 1e6 / OPS_PER_CALL for k, v in times.items()}


def main() -> int:
    args = parse_args(__doc__.split("\n\n")[0])
    machine = machine_info(args.quick)
    start = time.perf_counter()
    t = measure(args.quick)
    rows = [
        row("add, mm, relu 8×8 float32, no profiler", "µs/op", t["emu", "off"], t["cpu", "off"],
            t["emu", "off"] / t["cpu", "off"]),
        row("same, profiled with ProfilerActivity.CPU", "µs/op", t["emu", "cpu"], t["cpu", "cpu"],
            t["emu", "cpu"] / t["cpu", "cpu"]),
        row("same, profiled with CPU + PrivateUse1 on emu (CPU: CPU only)", "µs/op", t["emu", "trace"],
            t["cpu", "cpu"], t["emu", "trace"] / t["cpu", "cpu"]),
    ]
    on_off = t["emu", "trace"] / t["emu", "off"]
    met = "met" if on_off <= ON_OFF_TARGET else "NOT met"
    notes = (f"\nProfiled / unprofiled on emu: {on_off:.2f}× (target ≤ {ON_OFF_TARGET:g}×, {met}); "
             f"the device trace alone (CPU + PrivateUse1 vs CPU only): "
             f"{t['emu', 'trace'] / t['emu', 'cpu']:.2f}×; PyTorch's CPU profiler alone on CPU: "
             f"{t['cpu', 'cpu'] / t['cpu', 'off']:.2f}×.")
    return finish(args, start, machine, rows, notes=notes, gap_before_warning=True)


if __name__ == "__main__":
    raise SystemExit(main())
