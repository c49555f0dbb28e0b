"""What the runtime in Python costs: the same work on the native runtime and on the Python reference runtime.

    .venv/bin/python benchmarks/bench_python_runtime.py [--quick] [--json PATH]

For each runtime (TORCH_EMU_RUNTIME unset, then =python), in a process of its
own, with CPU measured in the same process: a small op (x + 1 on 8 floats,
synchronised every 100 ops), a 512x512 matmul, a 64 MiB copy host→emu (medians
of bench_foundation.bench), and the best training step of the demo's MLP
(batch 256). The per-op cost of the Python
runtime is what its bridge calls cost (each takes the GIL and calls a Python
method), plus its kernels: a launch with work queued runs on a Python thread.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_foundation import (bench, finish, machine_info, no_sync, parse_args, row, run_in_child,  # noqa: E402
                             serve_child, sync_emu)

RUNTIMES = ("native", "python")


def measure(quick: bool) -> dict:
    import torch
    import torch_emu
    from torch_emu.demo import train

    repeats = 3 if quick else 7

    def on(device):
        sync = sync_emu if device == "emu" else no_sync
        small = torch.randn(8, device=device)
        big = torch.randn(512, 512, device=device)
        host = torch.empty(64 * 2**20, dtype=torch.uint8)
        dst = torch.empty_like(host, device=device)
        times = bench(f"{device} small", {"small op": (lambda: small.add(1), sync)}, number=100,
                      repeats=repeats, warmup=10)
        times.update(bench(f"{device} big", {"matmul 512": (lambda: big @ big, sync),
                                             "copy 64 MiB": (lambda: dst.copy_(host), sync)},
                           number=3, repeats=repeats, warmup=1))
        steps = 5 if quick else 20
        train(device, 3, progress=False)  # warm-up
        times["training step"] = min(train(device, steps, progress=False)[1] for _ in range(2 if quick else 3))
        return times

    return {"runtime": torch_emu.runtime.active(), "emu": on("emu"), "cpu": on("cpu")}


def main() -> int:
    if serve_child(measure):
        return 0
    args = parse_args(__doc__.split("\n\n")[0])
    machine = machine_info(args.quick)
    start = time.perf_counter()
    results = {}
    for runtime in RUNTIMES:
        env = {k: v for k, v in os.environ.items() if k != "TORCH_EMU_RUNTIME"}
        if runtime != "native":
            env["TORCH_EMU_RUNTIME"] = runtime
        results[runtime] = run_in_child(__file__, env, args.quick, timeout=1200)
        assert results[runtime]["runtime"] == runtime
    rows, lines = [], []
    for work in results["native"]["emu"]:
        for runtime in RUNTIMES:
            r = results[runtime]
            unit = "µs" if work == "small op" else "ms"
            scale = 1e6 if unit == "µs" else 1e3
            rows.append(row(f"{work}, {runtime} runtime", unit, r["emu"][work] * scale, r["cpu"][work] * scale,
                            r["emu"][work] / r["cpu"][work]))
        native, python = results["native"]["emu"][work], results["python"]["emu"][work]
        lines.append(f"- {work}: the Python runtime takes {python / native:.2f}× the native runtime's time"
                     + (f" (+{(python - native) * 1e6:.1f} µs per op)" if work == "small op" else "") + ".")
    notes = "\nPython runtime against native, same work:\n" + "\n".join(lines)
    return finish(args, start, machine, rows, notes)


if __name__ == "__main__":
    sys.exit(main())
