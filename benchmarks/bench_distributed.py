"""all_reduce bandwidth over 2 processes: emu tensors with the emu_gloo backend
against CPU tensors with Gloo.

    .venv/bin/python benchmarks/bench_distributed.py [--quick] [--json PATH]

Starts two processes on 127.0.0.1 (rank r uses emu:r). Both groups use the
same Gloo transport; emu_gloo hands Gloo zero-copy host views of device
memory, so the target is at least 0.9x Gloo's bandwidth. Each number is the
median over repeats; emu and CPU blocks alternate inside every repeat so that
machine noise hits both alike. Prints a Markdown table; targets are reported,
never enforced. Bandwidth is algorithmic: tensor bytes / time, in GB/s (1e9).
"""

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.multiprocessing as mp

TARGET = 0.9
SIZES = {"1 MiB": 1 << 20, "64 MiB": 64 << 20}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _time_block(fn, number, barrier) -> float:
    barrier()
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def _worker(rank: int, world: int, port: int, quick: bool, out_path: str) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    import torch_emu.distributed  # noqa: F401

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("emu_gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    cpu_pg = dist.new_group(backend="gloo")
    dev = torch.device("emu", rank % torch.emu.device_count())
    torch.emu.set_device(dev)
    repeats = 3 if quick else 7
    results = {}
    for label, nbytes in SIZES.items():
        n = nbytes // 4
        number = (10 if quick else 50) if nbytes <= (1 << 20) else (2 if quick else 5)  # calls per timed block
        t_emu = torch.ones(n, device=dev)
        t_cpu = torch.ones(n)

        def emu():
            dist.all_reduce(t_emu)

        def cpu():
            dist.all_reduce(t_cpu, group=cpu_pg)

        def barrier():
            dist.barrier(group=cpu_pg)

        for _ in range(2):  # warm up connections and buffers
            emu()
            cpu()
        te, tc = [], []
        for i in range(repeats):
            order = [(emu, te), (cpu, tc)] if i % 2 == 0 else [(cpu, tc), (emu, te)]
            for fn, acc in order:
                acc.append(_time_block(fn, number, barrier))
        results[label] = {"bytes": nbytes, "emu_s": statistics.median(te), "cpu_s": statistics.median(tc)}
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args()
    world = 2
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        mp.spawn(_worker, args=(world, _free_port(), args.quick, out), nprocs=world, join=True)
        with open(out) as f:
            results = json.load(f)
    print(f"torch {torch.__version__}, {world} processes on one machine, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}{' (quick)' if args.quick else ''}")
    print()
    print("| all_reduce | Gloo, CPU tensors (GB/s) | emu_gloo, emu tensors (GB/s) | emu/Gloo bandwidth | target |")
    print("|---|---|---|---|---|")
    ok = True
    for label, r in results.items():
        bw_emu, bw_cpu = r["bytes"] / r["emu_s"] / 1e9, r["bytes"] / r["cpu_s"] / 1e9
        ratio = bw_emu / bw_cpu
        ok &= ratio >= TARGET
        print(f"| {label} float32 SUM | {bw_cpu:.2f} | {bw_emu:.2f} | {ratio:.2f}x | >= {TARGET}x |")
        r.update(gbps_emu=bw_emu, gbps_cpu=bw_cpu, ratio=ratio)
    if not ok:
        print("\nbelow target: rerun on a quieter machine before drawing conclusions", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
