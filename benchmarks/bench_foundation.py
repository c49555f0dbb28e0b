"""Foundation benchmark of torch-emu: how much slower (or faster) than CPU is
the same work on an emu device?

    .venv/bin/python benchmarks/bench_foundation.py [--quick] [--json PATH]

Prints a Markdown table of emu/CPU time ratios (< 1: emu is faster) for the
per-op overhead (8x8 add), an MLP training step and 64 MiB host<->device
copies, plus one line describing the machine. Emu and CPU measurements
alternate inside every repeat, so machine noise hits both alike; each number
is the median over the repeats. The MLP's CPU step is also timed alone, before
the first emu backward (see README). Targets are reported, never enforced.
"""

import argparse
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch_emu

MLP_TARGET = 1.5  # emu/CPU time of one training step, at most
NOISY = 0.3  # warn when the repeats of a measurement spread more than this
spreads = {}  # measurement -> interquartile range of the repeats / median


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def sync_emu() -> None:
    torch.emu.synchronize()


def no_sync() -> None:
    pass


def bench(label: str, cases: dict, number: int, repeats: int, warmup: int) -> dict:
    """Seconds per call of each case (name -> (fn, sync)), median of `repeats`.

    Every repeat runs each case `number` times, the cases one after the other
    (in reversed order every other repeat), each block after one untimed call
    (switching buffers costs cache and TLB misses that would otherwise land on
    the first call); the device is synchronised before the clock is read.
    """
    for fn, sync in cases.values():
        for _ in range(warmup):
            fn()
        sync()
    samples = {name: [] for name in cases}
    for r in range(repeats):
        for name in (list(cases) if r % 2 == 0 else list(reversed(cases))):
            fn, sync = cases[name]
            fn()
            sync()
            start = time.perf_counter()
            for _ in range(number):
                fn()
            sync()
            samples[name].append((time.perf_counter() - start) / number)
    medians = {name: statistics.median(s) for name, s in samples.items()}
    for name, s in samples.items():
        q1, _, q3 = statistics.quantiles(s, n=4)
        spreads[f"{label} {name}"] = (q3 - q1) / medians[name]
    return medians


def bench_add(quick: bool) -> list:
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    ae, be = a.to("emu"), b.to("emu")
    t = bench("add", {"emu": (lambda: ae + be, sync_emu), "cpu": (lambda: a + b, no_sync)},
              number=200 if quick else 2000, repeats=3 if quick else 9, warmup=100)
    return [row("add 8×8 float32", "µs/op", t["emu"] * 1e6, t["cpu"] * 1e6, t["emu"] / t["cpu"])]


def train_step(model, optimizer, x, y):
    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return step


def bench_mlp(quick: bool) -> list:
    torch.manual_seed(0)
    cpu_net = torch.nn.Sequential(
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    emu_net = copy.deepcopy(cpu_net).to("emu")
    x, y = torch.randn(64, 512), torch.randint(0, 10, (64,))
    steps = {}
    for device, net in (("cpu", cpu_net), ("emu", emu_net)):
        # Same optimizer and implementation (the per-parameter loop) on both.
        opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9, foreach=False)
        steps[device] = train_step(net, opt, x.to(device), y.to(device))
    number, repeats = (5, 3) if quick else (20, 9)
    # The first emu backward starts PyTorch's autograd thread for the device;
    # its OpenMP team then slows every parallel region in the process, CPU
    # ones included (see README). So the CPU baseline is first measured
    # alone, before that, then again interleaved with emu.
    alone = bench("MLP alone", {"cpu": (steps["cpu"], no_sync)}, number, repeats, warmup=5)["cpu"]
    t = bench("MLP", {"emu": (steps["emu"], sync_emu), "cpu": (steps["cpu"], no_sync)},
              number, repeats, warmup=5)
    name = "MLP train step 512→512→512→10, batch 64, SGD"
    return [row(f"{name}: CPU alone", "ms/step", t["emu"] * 1e3, alone * 1e3,
                t["emu"] / alone, target=MLP_TARGET),
            row(f"{name}: CPU interleaved", "ms/step", t["emu"] * 1e3, t["cpu"] * 1e3,
                t["emu"] / t["cpu"])]


def bench_copies(quick: bool) -> list:
    nbytes = 64 << 20
    n = nbytes // 4
    pageable = torch.rand(n)
    pinned = torch.rand(n, pin_memory=True)
    host_dst = {"pageable": torch.empty(n), "pinned": torch.empty(n, pin_memory=True)}
    host_src = {"pageable": pageable, "pinned": pinned}
    dev_src, dev_dst = pageable.to("emu"), torch.empty(n, device="emu")
    cpu_dst = torch.empty(n)
    cases = {"cpu": (lambda: cpu_dst.copy_(pageable), no_sync)}
    for kind in ("pageable", "pinned"):
        cases[f"H2D {kind}"] = (lambda s=host_src[kind]: dev_dst.copy_(s), sync_emu)
    for kind in ("pageable", "pinned"):
        cases[f"D2H {kind}"] = (lambda d=host_dst[kind]: d.copy_(dev_src), sync_emu)
    t = bench("copy", cases, number=2 if quick else 10, repeats=3 if quick else 9, warmup=2)
    gbps = lambda s: nbytes / s / 1e9  # noqa: E731
    return [row(f"copy 64 MiB {name}", "GB/s", gbps(t[name]), gbps(t["cpu"]),
                t[name] / t["cpu"]) for name in cases if name != "cpu"]


def run_in_child(script: str, env: dict, quick: bool, timeout: int = 1800) -> dict:
    """Runs ``script --child [--quick]`` in a fresh process with ``env`` (a
    configuration read at startup: launch mode, runtime, profile) and returns
    the JSON that its serve_child() printed."""
    cmd = [sys.executable, os.path.abspath(script), "--child"] + (["--quick"] if quick else [])
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=timeout).stdout
    return json.loads(out.strip().splitlines()[-1])


def serve_child(measure) -> bool:
    """In a process started by run_in_child: prints measure(quick) as JSON and
    returns True; elsewhere returns False."""
    if "--child" not in sys.argv:
        return False
    print(json.dumps(measure("--quick" in sys.argv)))
    return True


def row(name, unit, emu, cpu, ratio, target=None) -> dict:
    return {"benchmark": name, "unit": unit, "emu": emu, "cpu": cpu, "ratio": ratio,
            "target": target, "target_met": None if target is None else ratio <= target}


def table(rows: list) -> str:
    lines = ["| benchmark | unit | emu | CPU | emu/CPU time | target |",
             "|---|---|---:|---:|---:|---|"]
    for r in rows:
        target = "" if r["target"] is None else \
            f"≤ {r['target']}× ({'met' if r['target_met'] else 'NOT met'})"
        lines.append(f"| {r['benchmark']} | {r['unit']} | {r['emu']:.2f} | {r['cpu']:.2f} "
                     f"| {r['ratio']:.2f}× | {target} |")
    return "\n".join(lines)


def parse_args(description: str, extra=()) -> argparse.Namespace:
    """The command line shared by the benchmarks: --quick, --json PATH and the
    `extra` (flag, help) switches of one benchmark."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="few iterations (CI smoke run)")
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH")
    for flag, text in extra:
        parser.add_argument(flag, action="store_true", help=text)
    return parser.parse_args()


def machine_info(quick: bool) -> dict:
    return {"torch": torch.__version__, "torch_emu": torch_emu.__version__,
            "threads": torch.get_num_threads(), "cpu": cpu_model(),
            "load_average": os.getloadavg()[0],
            "python": platform.python_version(), "quick": quick}


def finish(args, start: float, machine: dict, rows: list, notes: str, intro: str = "",
           gap_before_warning: bool = False) -> int:
    """Print the machine line, `intro` (if any), the table of `rows`, `notes`,
    a warning naming the noisy measurements (after a blank line if
    `gap_before_warning`) and the time since `start`; write the JSON file if
    asked. Returns main()'s exit status."""
    print(f"torch {machine['torch']}, torch-emu {machine['torch_emu']}, "
          f"{machine['threads']} threads, {machine['cpu']}, load {machine['load_average']:.2f}"
          f"{' (--quick)' if machine['quick'] else ''}\n")
    if intro:
        print(intro)
    print(table(rows))
    print(notes)
    noisy = sorted(name for name, spread in spreads.items() if spread > NOISY)
    if noisy:
        gap = "\n" if gap_before_warning else ""
        print(f"{gap}Warning: noisy measurements ({', '.join(noisy)}): the middle half of their "
              f"repeats spreads over more than {NOISY:.0%} of the median; rerun on a quieter machine.")
    print(f"\n({time.perf_counter() - start:.1f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "results": rows, "spreads": spreads}, f, indent=2)
    return 0


def main() -> int:
    args = parse_args(__doc__.split("\n\n")[0])
    machine = machine_info(args.quick)
    start = time.perf_counter()
    rows = bench_add(args.quick) + bench_copies(args.quick) + bench_mlp(args.quick)  # MLP last
    return finish(args, start, machine, rows,
                  notes="\nCopies: the CPU column is a cpu→cpu `copy_` of the same 64 MiB.")


if __name__ == "__main__":
    raise SystemExit(main())
