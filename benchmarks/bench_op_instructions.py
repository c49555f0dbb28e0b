"""Instructions per small op, emu against CPU, counted by valgrind's callgrind.

    .venv/bin/python benchmarks/bench_op_instructions.py [--quick] [--top N]

A time moves with whatever else the machine does; an instruction count does
not, so this shows what a change to the per-op path (dispatch, device guard,
allocator, launch) removed, to the instruction, on a busy machine too. The
ops are bench_ops.py's, on 8×8 float32 (their time is almost all per-op cost),
back to back and each followed by .item(). Each device runs in one child
process under callgrind, counting only around each op's loop (a client request
from a small shim compiled here from valgrind's callgrind.h); the count covers
every thread, so a queued kernel's work on the stream's worker is in it.
--top N prints, for the first op, the N functions where emu spends the most
instructions beyond CPU (self cost). Needs valgrind with its headers and a C
compiler; a count is not a time (a lock or a cache miss costs more than its
instructions), so bench_ops.py stays the measure of speed.
"""

import argparse
import ctypes
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ops import small_ops, then_item  # noqa: E402

N = 8  # n×n float32: the per-op cost, not the kernel's work
LOOP = 200  # counted iterations per op
QUICK_OPS = ("add", "add_ in place", "sum", "cat", "index_select")

SHIM = r"""
#include <valgrind/callgrind.h>
void emu_cg_instrument(void) { CALLGRIND_START_INSTRUMENTATION; }
void emu_cg_begin(void) { CALLGRIND_ZERO_STATS; CALLGRIND_TOGGLE_COLLECT; }
void emu_cg_end(const char* name) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS_AT(name); }
"""


def cases(quick: bool) -> list:
    """(label, function of a device returning the op) in a fixed order."""
    out = []
    for name, make in small_ops(N).items():
        if quick and name not in QUICK_OPS:
            continue
        out.append((name, make))
        out.append((f"{name} then .item()", then_item(make)))
    return out


def child(device: str, shim_path: str, quick: bool) -> None:
    """Runs under callgrind: counts each case's loop and dumps it under its label."""
    shim = ctypes.CDLL(shim_path)
    sync = torch.emu.synchronize if device == "emu" else (lambda: None)
    shim.emu_cg_instrument()
    for label, make in cases(quick):
        run = make(device)
        for _ in range(20):
            run()
        sync()
        shim.emu_cg_begin()
        for _ in range(LOOP):
            run()
        sync()
        shim.emu_cg_end(label.encode())


def counts(folder: str, device: str) -> dict:
    """label -> (instructions per op, dump file) from the child's dumps."""
    out = {}
    for name in os.listdir(folder):
        if not name.startswith(f"cg.{device}."):
            continue
        path = os.path.join(folder, name)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 16)
        label = re.search(r"^desc: Trigger: Client Request: (.*)$", text, re.M)
        total = re.search(r"^(?:summary|totals): (\d+)$", text, re.M)
        if label and total:
            out[label.group(1)] = (int(total.group(1)) / LOOP, path)
    return out


def self_costs(path: str) -> dict:
    """function -> instructions it spent itself, from callgrind_annotate."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", path],
                          capture_output=True, text=True, check=True).stdout
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(?:[^:]*:)?(.*?)(?: \[[^\]]*\])?$", line)
        if m and "PROGRAM TOTALS" not in line:
            out[m.group(2)] = out.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_OPS)}")
    parser.add_argument("--top", type=int, default=0, metavar="N",
                        help="print the N functions of the first op where emu spends most beyond CPU")
    parser.add_argument("--child", choices=("cpu", "emu"), help=argparse.SUPPRESS)
    parser.add_argument("--shim", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.shim, args.quick)
        return 0
    if args.top < 0:
        parser.error(f"--top must be 0 or more, not {args.top}")
    missing = [tool for tool in ("valgrind", "callgrind_annotate", "cc") if shutil.which(tool) is None]
    if missing:
        print(f"needs {', '.join(missing)} (Debian: apt install valgrind gcc)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="emu-callgrind-") as folder:
        shim = os.path.join(folder, "shim.so")
        compiled = subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-x", "c", "-", "-o", shim],
                                  input=SHIM, text=True, capture_output=True)
        if compiled.returncode != 0:
            print(f"could not compile the callgrind shim (valgrind's headers?):\n{compiled.stderr}", file=sys.stderr)
            return 2
        for device in ("cpu", "emu"):
            cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
                   f"--callgrind-out-file={folder}/cg.{device}.%p", sys.executable, os.path.abspath(__file__),
                   "--child", device, "--shim", shim] + (["--quick"] if args.quick else [])
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
            if done.returncode != 0:
                print(f"the {device} child failed:\n{done.stderr[-3000:]}", file=sys.stderr)
                return 1
        cpu, emu = counts(folder, "cpu"), counts(folder, "emu")
        labels = [label for label, _ in cases(args.quick)]
        print(f"torch {torch.__version__}, callgrind, {N}×{N} float32, {LOOP} ops counted per row\n")
        print("| op | CPU instructions/op | emu instructions/op | emu/CPU |")
        print("|---|---:|---:|---:|")
        ratios = []
        for label in labels:
            c, e = cpu[label][0], emu[label][0]
            ratios.append(e / c)
            print(f"| {label} | {c:,.0f} | {e:,.0f} | {e / c:.2f} |")
        print(f"\nGeometric mean emu/CPU: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}")
        if args.top:
            first = labels[0]
            base, ours = self_costs(cpu[first][1]), self_costs(emu[first][1])
            extra = sorted(((ours.get(k, 0) - base.get(k, 0)) / LOOP, k) for k in set(base) | set(ours))
            print(f"\nWhere emu spends more than CPU on `{first}` (instructions per op, self cost):\n")
            for cost, name in reversed(extra[-args.top:]):
                print(f"{cost:8.0f}  {name[:140]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
