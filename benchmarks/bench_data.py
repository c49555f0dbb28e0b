"""Data-loading benchmark of torch-emu: host-to-device bandwidth from pinned
and pageable memory, and a DataLoader training loop on emu against CPU.

    .venv/bin/python benchmarks/bench_data.py [--quick] [--json PATH]

Prints a Markdown table in the format of bench_foundation.py (same timing
helper: warm-up, synchronise before reading the clock, cases alternating
inside every repeat, median of the repeats):

- H2D copies of 64 MiB and 4 MiB, from pageable and pinned memory, with
  ``non_blocking=False`` (each copy waits) and ``non_blocking=True`` (a block
  of copies queued, then one synchronisation), in GB/s; the CPU column is a
  cpu->cpu ``copy_`` of the same size.
- One epoch of an MLP trained from a DataLoader, per step: CPU, emu with
  ``pin_memory=True`` and ``non_blocking`` copies on the current stream, and
  emu with ``torch_emu.data.Prefetcher`` (copies on a side stream).
"""

import copy
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

import bench_foundation as bf  # same directory: the timing helper, the table and main()'s parts
from torch_emu.data import Prefetcher


def bench_h2d(quick: bool) -> list:
    rows = []
    for nbytes, label in ((64 << 20, "64 MiB"), (4 << 20, "4 MiB")):
        n = nbytes // 4
        host = {"pageable": torch.rand(n), "pinned": torch.rand(n).pin_memory()}
        dev = torch.empty(n, device="emu")
        cpu_dst = torch.empty(n)
        cases = {"cpu": (lambda s=host["pageable"]: cpu_dst.copy_(s), bf.no_sync)}
        for kind in ("pageable", "pinned"):
            for nb in (False, True):
                mode = "non_blocking" if nb else "sync"
                cases[f"{kind} {mode}"] = (lambda s=host[kind], nb=nb: dev.copy_(s, non_blocking=nb), bf.sync_emu)
        number = (2 if quick else 10) * (64 << 20) // nbytes  # about the same bytes per block
        t = bf.bench(f"H2D {label}", cases, number=number, repeats=3 if quick else 9, warmup=2)
        gbps = lambda s: nbytes / s / 1e9  # noqa: E731
        rows += [bf.row(f"H2D {label} {name}", "GB/s", gbps(t[name]), gbps(t["cpu"]), t[name] / t["cpu"])
                 for name in cases if name != "cpu"]
    return rows


def bench_loader(quick: bool) -> list:
    torch.manual_seed(0)
    batches, batch_size, features = (8 if quick else 16), 256, 1024
    data = TensorDataset(torch.randn(batches * batch_size, features),
                         torch.randint(0, 10, (batches * batch_size,)))
    net = torch.nn.Sequential(torch.nn.Linear(features, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))

    def epoch(device, loader_of, prefetch):
        model = copy.deepcopy(net).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=False)

        def run():
            loader = loader_of()
            it = Prefetcher(loader, device) if prefetch else loader
            for x, y in it:
                if not prefetch:
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        return run

    plain = lambda: DataLoader(data, batch_size=batch_size)  # noqa: E731
    pinned = lambda: DataLoader(data, batch_size=batch_size, pin_memory=True)  # noqa: E731
    cases = {
        "cpu": (epoch("cpu", plain, prefetch=False), bf.no_sync),
        "emu non_blocking": (epoch("emu", pinned, prefetch=False), bf.sync_emu),
        "emu Prefetcher": (epoch("emu", pinned, prefetch=True), bf.sync_emu),
    }
    t = bf.bench("loader", cases, number=1, repeats=3 if quick else 5, warmup=1)
    ms = lambda s: s / batches * 1e3  # noqa: E731
    name = f"DataLoader epoch, MLP {features}→512→10, batch {batch_size}, pin_memory"
    return [bf.row(f"{name}: {case}", "ms/step", ms(t[case]), ms(t["cpu"]), t[case] / t["cpu"])
            for case in cases if case != "cpu"]


def main() -> int:
    args = bf.parse_args(__doc__.split("\n\n")[0])
    machine = bf.machine_info(args.quick)
    start = time.perf_counter()
    rows = bench_h2d(args.quick) + bench_loader(args.quick)
    return bf.finish(args, start, machine, rows,
                     notes="\nH2D: the CPU column is a cpu→cpu `copy_` of the same size; `sync` waits for "
                           "every copy, `non_blocking` queues a block of copies and synchronises once.")


if __name__ == "__main__":
    raise SystemExit(main())
