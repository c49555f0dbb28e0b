"""Discovery, one process per tier with a timeout, the table, the JSON report and the exit code."""

import argparse
import concurrent.futures
import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

from ..argtypes import existing, output_file, positive
from .worker import checks_of, load_module

HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "worker.py"


@dataclasses.dataclass
class Tier:
    name: str
    meaning: str
    chapter: str
    path: str
    order: int
    checks: list  # [(name, meaning)]


def first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0] if (doc or "").strip() else ""


def discover(extra: list[str]) -> list[Tier]:
    """The built-in tiers (checks/*.py) and the vendor's modules given with --checks-module."""
    paths = sorted(str(p) for p in (HERE / "checks").glob("*.py") if not p.name.startswith("_"))
    tiers = {}
    for path in paths + [str(pathlib.Path(p).resolve()) for p in extra]:
        try:
            module = load_module(path)
        except Exception as e:  # a vendor's module that does not load: one line naming it, no traceback
            raise ValueError(f"{path} does not load: {type(e).__name__}: {e}") from e
        name = getattr(module, "TIER", None)
        if not name:
            raise ValueError(f"{path} defines no TIER")
        if name in tiers:
            raise ValueError(f"tier {name!r} is defined twice ({tiers[name].path} and {path})")
        checks = [(f.__name__, first_line(f.__doc__)) for f in checks_of(module)]
        if not checks:  # it would pass having checked nothing
            raise ValueError(f"{path}: tier {name!r} has no checks (functions named check_*)")
        tiers[name] = Tier(name, first_line(module.__doc__), getattr(module, "CHAPTER", ""), path,
                           getattr(module, "ORDER", 1000), checks)
    return sorted(tiers.values(), key=lambda t: (t.order, t.name))


# LITERALINCLUDE START: RUN_TIER
def run_worker(cmd: list[str], results: pathlib.Path, timeout: float,
               cwd: pathlib.Path | None = None) -> tuple[list[dict], str | None, float]:
    """Runs a worker in a fresh interpreter with a timeout: the JSON lines it wrote to
    `results`, how it died (None if it did not) and the seconds it took."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own group: a timeout kills its children too
    try:
        _, stderr = proc.communicate(timeout=timeout)
        died = None if proc.returncode == 0 else describe_exit(proc.returncode, stderr)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        died = f"timed out after {timeout:g} s"
    events = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    return events, died, time.perf_counter() - start


def run_tier(tier: Tier, device: str, imports: list[str], timeout: float) -> dict:
    """Runs one tier in a fresh interpreter; a crash or a hang fails the check it happened in."""
    with tempfile.TemporaryDirectory() as tmp:
        results = pathlib.Path(tmp, "results.jsonl")
        results.touch()
        events, died, seconds = run_worker(
            [sys.executable, str(WORKER), tier.path, str(results), device or "", *imports], results, timeout)
    # LITERALINCLUDE END: RUN_TIER
    results_by_check = {e["check"]: e for e in events if e["event"] == "end"}
    started = [e["check"] for e in events if e["event"] == "start"]
    checks = []
    for name, meaning in tier.checks:
        entry = {"check": name, "meaning": meaning, "status": "not run", "reason": None, "note": None, "seconds": None}
        if name in results_by_check:
            entry.update({k: results_by_check[name][k] for k in ("status", "reason", "note", "seconds")})
        elif died and name in started:
            entry.update(status="failed", reason=died)
        checks.append(entry)
    if died and not started:  # the process died before its first check (import, backend load)
        checks.insert(0, {"check": "<startup>", "meaning": "the tier's process starts", "status": "failed",
                          "reason": died, "note": None, "seconds": None})
    count = {s: sum(c["status"] == s for c in checks) for s in ("passed", "failed", "skipped")}
    failure = next((c for c in checks if c["status"] == "failed"), None)
    device = next((e["device"] for e in events if e["event"] == "device"), device)
    return {"tier": tier.name, "meaning": tier.meaning, "chapter": tier.chapter, "device": device, **count,
            "ok": count["failed"] == 0, "seconds": round(seconds, 2),
            "first_failure": failure and f"{failure['check']}: {failure['reason']}", "checks": checks}


def describe_exit(code: int, stderr: str) -> str:
    """Why the worker ended badly: the signal that killed it, or the last line it printed."""
    if code < 0:
        return f"process killed by {signal.Signals(-code).name}"
    last = [line for line in stderr.strip().splitlines() if line.strip()]
    return f"process exited with code {code}" + (f": {last[-1].strip()}" if last else "")


def table(report: list[dict]) -> str:
    rows = [("tier", "passed", "failed", "skipped", "seconds", "first failure")]
    for r in report:
        rows.append((r["tier"], str(r["passed"]), str(r["failed"]), str(r["skipped"]), f"{r['seconds']:.1f}",
                     r["first_failure"] or ""))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row[:5], widths)) + "  " + row[5] for row in rows)


def listing(tiers: list[Tier]) -> str:
    lines = []
    for t in tiers:
        lines.append(f"{t.name}: {t.meaning}" + (f" (guide: docs/guide/{t.chapter}.md)" if t.chapter else ""))
        lines += [f"  {name}: {meaning}" for name, meaning in t.checks]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", help="device type to check (default: the loaded PrivateUse1 backend's name)")
    parser.add_argument("--tier", nargs="+", action="extend", metavar="T", help="tiers to run (default: all)")
    parser.add_argument("--json", metavar="FILE", type=output_file, help="also write the report as JSON to FILE")
    parser.add_argument("--list", action="store_true", help="list the tiers and their checks, run nothing")
    parser.add_argument("--timeout", type=positive(float), default=300,
                        help="seconds per tier before it fails (default 300)")
    parser.add_argument("--jobs", type=positive(int), default=1, metavar="N",
                        help="tiers run at the same time, each in its own process (default 1)")
    parser.add_argument("--full", action="store_true",
                        help="sampled tiers (parity) check everything, not a sample (sets TORCH_CONFORMANCE_FULL=1)")
    parser.add_argument("--checks-module", action="append", default=[], metavar="PATH", type=existing("file"),
                        help="a Python file defining another tier (TIER, CHAPTER and check_* functions)")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="module each tier's process imports first, for a backend torch does not autoload")


def run(args: argparse.Namespace) -> int:
    if args.full:
        os.environ["TORCH_CONFORMANCE_FULL"] = "1"  # inherited by the tiers' processes
    try:
        tiers = discover(args.checks_module)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.list:
        print(listing(tiers))
        return 0
    known = {t.name: t for t in tiers}
    unknown = [t for t in args.tier or [] if t not in known]
    if unknown:
        print(f"error: unknown tier(s) {', '.join(unknown)}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    selected = [known[n] for n in dict.fromkeys(args.tier)] if args.tier else tiers
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        running = [pool.submit(run_tier, tier, args.device, args.imports, args.timeout) for tier in selected]
        for done in concurrent.futures.as_completed(running):
            print(table([done.result()]).splitlines()[1], flush=True)  # progress: one row per finished tier
    report = [r.result() for r in running]  # in the order of the tiers
    ok = all(r["ok"] for r in report)
    print("\n" + table(report))
    print(f"\n{'PASSED' if ok else 'FAILED'}: {sum(r['ok'] for r in report)}/{len(report)} tiers")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"device": report[0]["device"] if report else args.device,
                                                  "ok": ok, "tiers": report}, indent=2))
    return 0 if ok else 1
