"""PyTorch's own device-generic test files against the loaded PrivateUse1 backend.

Every test of a file that calls ``instantiate_device_type_tests`` runs on CPU and on the
backend's device; the report pairs the two results of each test. What matters is the list of
tests that **fail on the device while they pass on CPU**: a difference between the backend and
CPU that PyTorch's own tests see. Each file runs in a process of its own with a timeout; a file
that does not import against the installed torch (a checkout newer or older than it) is reported
as version skew, not counted.

  torch-emu-kit upstream --pytorch ~/src/pytorch --file test_torch.py
  torch-emu-kit upstream --pytorch ~/src/pytorch --import torch_foo   # a backend torch does not autoload

A skip file (``--skip-file``, written by ``--write-skip-file``) says per test file which device
tests not to run and why, by test (``skipped_testcases``) or by OpInfo operator (``op_skips``):
a CI runs only what is expected to pass and sees each new failure.
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
from collections import Counter

from ..argtypes import existing, output_file, positive
from .runner import run_worker

WORKER = pathlib.Path(__file__).resolve().parent / "upstream_worker.py"

# LITERALINCLUDE START: UPSTREAM_FILES
# The device-generic files run by default: tensors, views, indexing, shapes,
# sorting, creation, type promotion, reductions, elementwise ops, linear algebra.
DEFAULT_FILES = [
    "test_torch.py", "test_view_ops.py", "test_indexing.py", "test_shape_ops.py", "test_sort_and_select.py",
    "test_tensor_creation_ops.py", "test_type_promotion.py", "test_reductions.py", "test_binary_ufuncs.py",
    "test_unary_ufuncs.py", "test_linalg.py",
]
# LITERALINCLUDE END: UPSTREAM_FILES

# A PrivateUse1 test skipped with this reason is one PyTorch restricts to some
# device types (onlyCUDA, onlyOn): --bypass-device-restrictions runs it.
RESTRICTED = "Only runs on"


# LITERALINCLUDE START: UPSTREAM_RUN_FILE
def run_test_file(path: pathlib.Path, options: dict, timeout: float) -> tuple[list[dict], str | None, float]:
    """Runs one test file in a fresh interpreter: its events, how it died (if it did), seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        results, settings = pathlib.Path(tmp, "results.jsonl"), pathlib.Path(tmp, "options.json")
        settings.write_text(json.dumps(options))
        results.touch()
        return run_worker([sys.executable, str(WORKER), str(path), str(results), str(settings)], results, timeout,
                          cwd=path.parent)


def run_file(path: pathlib.Path, options: dict, timeout: float) -> tuple[list[dict], str | None, float]:
    """Runs a test file to the end: when its process dies (a crash, a hang), the test it was in
    fails with the reason, and a new process runs the tests not done yet, within the timeout."""
    events, died, seconds = run_test_file(path, options, timeout)
    for _ in range(MAX_RESTARTS):
        dead = died and started_not_ended(events)
        if not dead or seconds >= timeout:
            break
        done = [e["name"] for e in events if e["event"] == "end"] + [dead["name"]]
        events.append({**dead, "event": "end", "status": "failed", "message": died})
        more, died, more_seconds = run_test_file(path, {**options, "exclude": done}, timeout - seconds)
        events += [e for e in more if e["event"] not in ("backend", "collected")]
        seconds += more_seconds
    return events, died, seconds


MAX_RESTARTS = 20


def started_not_ended(events: list[dict]) -> dict | None:
    ended = {e["name"] for e in events if e["event"] == "end"}
    return next((e for e in reversed(events) if e["event"] == "start" and e["name"] not in ended), None)


def results_of(events: list[dict], died: str | None) -> dict:
    """Per test (its name on no device): the CPU and the device result, each (status, message).
    A test that started and never ended is where the process died."""
    results: dict = {}
    for event in events:
        if event["event"] == "collected":
            for test in event["tests"]:
                results.setdefault(test["key"], {})[test["device"]] = ("not run", died)
        elif event["event"] == "start":
            results[event["key"]][event["device"]] = ("failed", died or "did not finish")
        elif event["event"] == "end":
            results[event["key"]][event["device"]] = (event["status"], event["message"])
    return results
# LITERALINCLUDE END: UPSTREAM_RUN_FILE


# LITERALINCLUDE START: UPSTREAM_CLASSIFY
def classify(cpu: tuple | None, device: tuple | None) -> str:
    """What a pair of results says about the device."""
    ok = ("passed", "expected failure")
    if device is None:
        return "cpu only"
    if device[0] == "skip file":
        return "skip file"
    if device[0] == "skipped":
        return "device skipped"
    if cpu is None:
        return "device only passed" if device[0] in ok else "device only failed"
    if cpu[0] == "skipped" and device[0] not in ok:
        # CPU skips it (a limitation of CPU's, as PyTorch decorates it): nothing to compare
        # with, and the device ran it and failed.
        return "device failed, cpu skipped"
    if cpu[0] not in ok:
        return "both failed" if device[0] not in ok else "device passed, cpu not"
    return "both passed" if device[0] in ok else "device failed, cpu passed"


def file_report(name: str, path: pathlib.Path, args: argparse.Namespace, skips: dict) -> dict:
    options = {"imports": args.imports, **skips.get(name, {})}
    # One process per device: what a test leaves behind (a TORCH_WARN_ONCE fired by CPU's kernel,
    # which a backend running CPU's kernels shares) must not decide its other variant's result.
    report, events, seconds = {"file": name, "commit": commit_of(path), "died": None}, [], 0.0
    for device in ("cpu", "privateuse1"):
        more, died, more_seconds = run_file(path, {**options, "device": device}, args.timeout)
        events, seconds = events + more, seconds + more_seconds
        report.update(seconds=round(seconds, 1), died=report["died"] or died)
        skew = next((e["message"] for e in events if e["event"] == "import error"), None)
        if skew or not any(e["event"] == "collected" for e in events):
            return {**report, "import error": skew or report["died"] or "the worker collected no tests"}
    pairs = {key: (r.get("cpu"), r.get("privateuse1")) for key, r in results_of(events, report["died"]).items()}
    if args.bypass_device_restrictions:
        restricted = [k for k, (_, d) in pairs.items() if d and d[0] == "skipped" and d[1].startswith(RESTRICTED)]
        report["restricted"] = run_restricted(path, options, restricted, args.timeout)
    kinds = {key: classify(*pair) for key, pair in pairs.items()}

    def messages(kind: str, side: int = 1) -> dict:  # side 0: CPU's message, 1: the device's
        return {k: pairs[k][side][1] for k, c in kinds.items() if c == kind}

    return {**report, "counts": dict(Counter(kinds.values())),
            "device failed, cpu passed": messages("device failed, cpu passed"),
            "device only failed": messages("device only failed"),
            "device failed, cpu skipped": messages("device failed, cpu skipped"),
            "both failed": messages("both failed", side=0),
            "device skipped": dict(Counter(messages("device skipped").values())),
            "skip file": messages("skip file")}


def run_restricted(path: pathlib.Path, options: dict, keys: list[str], timeout: float) -> dict:
    """The device tests PyTorch restricts to native device types, run on the device anyway."""
    if not keys:
        return {"passed": [], "failed": {}}
    events, died, _ = run_file(path, {**options, "device": "privateuse1", "only": keys, "bypass": True}, timeout)
    device = {k: r["privateuse1"] for k, r in results_of(events, died).items() if "privateuse1" in r}
    return {"passed": sorted(k for k, (s, _) in device.items() if s == "passed"),
            "failed": {k: m for k, (s, m) in sorted(device.items()) if s == "failed"}}
# LITERALINCLUDE END: UPSTREAM_CLASSIFY


def commit_of(path: pathlib.Path) -> str | None:
    """The commit of the checkout the file was read from, when it is a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(path.parent), "log", "-1", "--format=%H", "--", path.name],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


COLUMNS = ["both passed", "device failed, cpu passed", "device failed, cpu skipped", "both failed",
           "device passed, cpu not", "device skipped", "skip file", "device only passed", "device only failed"]
# The kinds that fail the run (the device failed and CPU did not show the test fails), with
# the heading each is listed under.
FAILING = {"device failed, cpu passed": "fails on the device, passes on CPU",
           "device failed, cpu skipped": "fails on the device, skipped on CPU",
           "device only failed": "device-only test fails"}


def table(reports: list[dict]) -> str:
    heads = ["file", "both pass", "DEVICE FAILS", "dev fail cpu skip", "both fail", "dev>cpu", "dev skip",
             "skip file", "dev-only ok", "dev-only fail", "seconds"]
    rows = [heads]
    for r in reports:
        if "import error" in r:
            rows.append([r["file"], f"not imported (version skew?): {r['import error']}"])
            continue
        rows.append([r["file"], *(str(r["counts"].get(c, 0)) for c in COLUMNS), f"{r['seconds']:.0f}"])
    widths = [max(len(row[i]) for row in rows if len(row) == len(heads)) for i in range(len(heads))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) if len(row) == len(heads)
                     else "  ".join(row) for row in rows)


def details(reports: list[dict]) -> str:
    lines = []
    for r in reports:
        for kind, heading in FAILING.items():
            entries = r.get(kind, {})
            if entries:
                lines.append(f"\n{r['file']}: {len(entries)} {heading}")
                lines += [f"  {key}: {message}" for key, message in sorted(entries.items())]
        restricted = r.get("restricted")
        if restricted:
            lines.append(f"\n{r['file']}: restricted to native device types, run anyway: "
                         f"{len(restricted['passed'])} passed, {len(restricted['failed'])} failed")
            lines += [f"  {key}: {message}" for key, message in restricted["failed"].items()]
        if r.get("died"):
            lines.append(f"\n{r['file']}: its last process ended badly: {r['died']}")
    return "\n".join(lines)


# LITERALINCLUDE START: UPSTREAM_SKIP_FILE
def read_skip_file(path: str | None) -> dict:
    """{test file: {"skipped_testcases": {test: reason}, "op_skips": {op: reason}}}."""
    if not path:
        return {}
    try:
        skips = json.loads(pathlib.Path(path).read_text())
    except ValueError as e:  # not JSON, not text
        raise ValueError(f"{path}: {e}") from None
    if not isinstance(skips, dict):
        raise ValueError(f"{path}: expected {{test file: entry}}")
    for name, entry in skips.items():
        if not isinstance(entry, dict) or set(entry) - {"skipped_testcases", "op_skips"} or \
                not all(isinstance(v, dict) for v in entry.values()):
            raise ValueError(f"{path}: {name}: expected skipped_testcases and op_skips, each {{name: reason}}")
    return skips


def skip_file_of(reports: list[dict], previous: dict) -> dict:
    """The skip file that lets every file pass: the previous entries, and each test that
    failed on the device while it passed on CPU with its first error line as the reason."""
    skips = {name: {k: dict(v) for k, v in entry.items()} for name, entry in previous.items()}
    for r in reports:
        failed = {k: v for kind in FAILING for k, v in r.get(kind, {}).items()}
        if failed:
            entry = skips.setdefault(r["file"], {"skipped_testcases": {}, "op_skips": {}})
            entry.setdefault("skipped_testcases", {}).update(failed)
    return skips
# LITERALINCLUDE END: UPSTREAM_SKIP_FILE


def test_folder(pytorch: str) -> pathlib.Path:
    root = pathlib.Path(pytorch).expanduser().resolve()
    return root / "test" if (root / "test").is_dir() else root


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pytorch", required=True, metavar="PATH", type=existing("folder"),
                        help="a PyTorch source checkout (or its test/ folder) to read the test files from")
    parser.add_argument("--file", dest="files", action="append", metavar="NAME",
                        help=f"a test file to run (repeat; default: {len(DEFAULT_FILES)} device-generic files)")
    parser.add_argument("--timeout", type=positive(float), default=1800,
                        help="seconds per file before it stops (default 1800)")
    parser.add_argument("--json", metavar="FILE", type=output_file, help="also write the report as JSON to FILE")
    parser.add_argument("--skip-file", metavar="FILE", type=existing("file"),
                        help="device tests not to run, with reasons (JSON)")
    parser.add_argument("--write-skip-file", metavar="FILE", type=output_file,
                        help="write a skip file: --skip-file's entries and every device failure of this run")
    parser.add_argument("--bypass-device-restrictions", action="store_true",
                        help="also run the device tests PyTorch restricts to native device types, reported apart")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="module each file's process imports first, for a backend torch does not autoload")


def run(args: argparse.Namespace) -> int:
    folder = test_folder(args.pytorch)
    files = args.files or DEFAULT_FILES
    missing = [f for f in files if not (folder / f).is_file()]
    try:
        skips = read_skip_file(args.skip_file)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if missing:
        print(f"error: not in {folder}: {', '.join(missing)}", file=sys.stderr)
        return 2
    reports = []
    for name in files:
        reports.append(file_report(name, folder / name, args, skips))
        print(table(reports[-1:]).splitlines()[1], flush=True)  # progress: one row per file
    print("\n" + table(reports) + details(reports))
    failing = sum(len(r.get(kind, {})) for r in reports for kind in FAILING)
    print(f"\n{'PASSED' if failing == 0 else 'FAILED'}: {failing} device test(s) fail where CPU passes or skips"
          f"{', ' + str(sum('import error' in r for r in reports)) + ' file(s) not imported' if any('import error' in r for r in reports) else ''}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"files": reports}, indent=2))
    if args.write_skip_file:
        pathlib.Path(args.write_skip_file).write_text(json.dumps(skip_file_of(reports, skips), indent=2) + "\n")
    return 0 if failing == 0 else 1
