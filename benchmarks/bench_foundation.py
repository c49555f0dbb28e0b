"""Foundation benchmark of torch-emu: how much slower (or faster) than CPU is
the same work on an emu device?

    .venv/bin/python benchmarks/bench_foundation.py [--quick] [--json PATH]

Prints a Markdown table of emu/CPU time ratios (< 1: emu is faster) for the
per-op overhead (8x8 add), an MLP training step and 64 MiB host<->device
copies, plus one line describing the machine. Emu and CPU measurements
alternate inside every repeat, so machine noise hits both alike; each number
is the median over the repeats. Targets are reported, never enforced.
"""

import argparse
import copy
import json
import platform
import statistics
import time

import torch
import torch_emu

MLP_TARGET = 1.5  # emu/CPU time of one training step, at most


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


def bench(cases: dict, number: int, repeats: int, warmup: int) -> dict:
    """Seconds per call of each case (name -> (fn, sync)), median of `repeats`.

    Every repeat runs each case `number` times, the cases one after the other
    (in reversed order every other repeat); the device is synchronised before
    the clock is read at either end.
    """
    for fn, sync in cases.values():
        for _ in range(warmup):
            fn()
        sync()
    samples = {name: [] for name in cases}
    for r in range(repeats):
        for name in (list(cases) if r % 2 == 0 else list(reversed(cases))):
            fn, sync = cases[name]
            sync()
            start = time.perf_counter()
            for _ in range(number):
                fn()
            sync()
            samples[name].append((time.perf_counter() - start) / number)
    return {name: statistics.median(s) for name, s in samples.items()}


def bench_add(quick: bool) -> list:
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    ae, be = a.to("emu"), b.to("emu")
    t = bench({"emu": (lambda: ae + be, sync_emu), "cpu": (lambda: a + b, no_sync)},
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
    cpu_model_ = torch.nn.Sequential(
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    emu_model = copy.deepcopy(cpu_model_).to("emu")
    x, y = torch.randn(64, 512), torch.randint(0, 10, (64,))
    steps = {}
    for device, model in (("cpu", cpu_model_), ("emu", emu_model)):
        # Same optimizer and implementation (the per-parameter loop) on both.
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=False)
        steps[device] = train_step(model, opt, x.to(device), y.to(device))
    t = bench({"emu": (steps["emu"], sync_emu), "cpu": (steps["cpu"], no_sync)},
              number=5 if quick else 20, repeats=3 if quick else 9, warmup=5)
    ratio = t["emu"] / t["cpu"]
    return [row("MLP train step 512→512→512→10, batch 64, SGD", "ms/step",
                t["emu"] * 1e3, t["cpu"] * 1e3, ratio, target=MLP_TARGET)]


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
    t = bench(cases, number=2 if quick else 5, repeats=3 if quick else 7, warmup=2)
    gbps = lambda s: nbytes / s / 1e9  # noqa: E731
    return [row(f"copy 64 MiB {name}", "GB/s", gbps(t[name]), gbps(t["cpu"]),
                t[name] / t["cpu"]) for name in cases if name != "cpu"]


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (CI smoke run)")
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH")
    args = parser.parse_args()

    machine = {"torch": torch.__version__, "torch_emu": torch_emu.__version__,
               "threads": torch.get_num_threads(), "cpu": cpu_model(),
               "python": platform.python_version(), "quick": args.quick}
    start = time.perf_counter()
    rows = bench_add(args.quick) + bench_mlp(args.quick) + bench_copies(args.quick)
    print(f"torch {machine['torch']}, torch-emu {machine['torch_emu']}, "
          f"{machine['threads']} threads, {machine['cpu']}"
          f"{' (--quick)' if args.quick else ''}\n")
    print(table(rows))
    print("\nCopies: the CPU column is a cpu→cpu `copy_` of the same 64 MiB.")
    print(f"\n({time.perf_counter() - start:.1f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "results": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
