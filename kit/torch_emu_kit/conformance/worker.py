"""One tier in a fresh process: ``python worker.py MODULE_PATH RESULTS_FILE [DEVICE] [IMPORT...]``.

Runs by file path (not as part of a package) so that the only backend in the process is the one
torch autoloads or ``--import`` names. Writes one JSON line per event to RESULTS_FILE and flushes
it at once, so that the parent knows which check was running if this process dies or hangs.
"""

import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
import traceback
import unittest


def load_module(path: str):
    """A check module from its file, under a private name. While it loads, its folder is importable,
    last on sys.path so that it shadows nothing installed: a module there whose name starts with
    ``_`` (not a tier) holds helpers several tiers share, as checks/_parity.py does."""
    name = "_conformance_" + path.replace("/", "_").replace(".", "_")
    # An explicit loader: a file not named *.py loads too (or fails with a SyntaxError) instead of having no spec.
    spec = importlib.util.spec_from_file_location(name, path, loader=importlib.machinery.SourceFileLoader(name, path))
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.append(folder)
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.path[len(sys.path) - 1 - sys.path[::-1].index(folder)]  # the entry added above
    return module


def checks_of(module) -> list:
    """The module's checks: its ``check_*`` functions, in source order."""
    funcs = [v for k, v in vars(module).items() if k.startswith("check_") and callable(v)]
    return sorted(funcs, key=lambda f: f.__code__.co_firstlineno)


def reason_of(e: BaseException, path: str) -> str:
    """One line: the exception, its message (or the failing source line), and the check's line."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == path] or \
        traceback.extract_tb(e.__traceback__)
    message = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if not message and frames:
        message = frames[-1].line or ""
    where = f" ({frames[-1].name}:{frames[-1].lineno})" if frames else ""
    return f"{type(e).__name__}: {message}{where}"


def main(argv: list[str]) -> int:
    path, results, device, imports = argv[0], argv[1], argv[2], argv[3:]
    out = open(results, "a", buffering=1)

    def emit(**event):
        out.write(json.dumps(event) + "\n")
        out.flush()

    # Processes a check spawns import only torch: they read this to load the backend the same way.
    os.environ["TORCH_CONFORMANCE_IMPORTS"] = ",".join(imports)
    for name in imports:
        importlib.import_module(name)
    import torch

    device = device or torch._C._get_privateuse1_backend_name()
    emit(event="device", device=device)
    module = load_module(path)
    for check in checks_of(module):
        emit(event="start", check=check.__name__)
        start = time.perf_counter()
        status, reason, note = "passed", None, None
        try:
            if device == "privateuseone":
                raise RuntimeError("no PrivateUse1 backend is loaded (name it with --device or load it with --import)")
            note = check(device)
            note = note if isinstance(note, str) else None
        except unittest.SkipTest as e:
            status, reason = "skipped", str(e)
        except BaseException as e:  # a failing check must not stop the tier
            status, reason = "failed", reason_of(e, path)
        emit(event="end", check=check.__name__, status=status, reason=reason, note=note,
             seconds=round(time.perf_counter() - start, 3))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
