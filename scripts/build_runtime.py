"""The one build recipe of the runtime (csrc/runtime: plain C++17, no torch).

Each flavour compiles csrc/runtime/*.cpp once into a static library,
build/runtime/<flavour>/libemu_runtime.a (position independent), with ninja: a
rebuild compiles only the sources whose file or headers changed. The same
ninja file links the native test programs (tests/native/<name>.cpp) against
that library, into build/runtime/<flavour>/bin/<name>. Users:

- setup.py links the release library into torch_emu._C (the asan one under
  TORCH_EMU_SANITIZE=address);
- tests/test_runtime_native.py and tests/test_graphs.py run the release
  programs;
- scripts/sanitize.sh runs the asan and tsan programs.

The library is linked whole (-Wl,--whole-archive): the extension exports
every C entry point of the runtime, also those nothing in it calls (ctypes
users such as tests/test_memory_parity.py, another runtime's bridge), and an
archive would otherwise keep only the members that resolve a symbol.

    python scripts/build_runtime.py [release|asan|tsan] [--programs NAME ...]

MAX_JOBS bounds ninja's parallel jobs, as it does the extension's build; CXX
names the compiler (default c++, as torch.utils.cpp_extension).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_flags import OPTIMISED, WARNINGS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "csrc" / "runtime"
NATIVE_TESTS = ROOT / "tests" / "native"
LIBRARY = "libemu_runtime.a"

COMMON = ["-std=c++17", "-fPIC", "-pthread"]
# The runtime's sources (not the test programs): the extension's warning flags, plus -Wall -Wextra,
# unused parameters included (the native tests held the runtime to -Wall -Wextra -Werror before it
# was a library; tests/test_runtime_native.py still checks that it compiles without a warning).
RUNTIME_WARNINGS = ["-Wall", "-Wextra", *(w for w in WARNINGS if w != "-Wno-unused-parameter")]
# LITERALINCLUDE START: RUNTIME_FLAVOURS
FLAVOURS = {
    # What the extension compiles with (scripts/build_flags.py), NDEBUG as in its release build.
    "release": [*OPTIMISED, "-DNDEBUG"],
    # AddressSanitizer + UndefinedBehaviorSanitizer; vptr checks off, as in the sanitized extension
    # (they would need every library in the process built with them).
    "asan": ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize=vptr", "-fno-sanitize-recover=undefined",
             "-fno-omit-frame-pointer"],
    "tsan": ["-O1", "-g", "-fsanitize=thread"],
}
# LITERALINCLUDE END: RUNTIME_FLAVOURS


def directory(flavour: str) -> Path:
    """build/runtime/<flavour>: libemu_runtime.a, obj/ (with each object's compiler output in
    <name>.o.log) and bin/ (the native test programs)."""
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown runtime flavour {flavour!r}: expected one of {', '.join(FLAVOURS)}")
    return ROOT / "build" / "runtime" / flavour


def library(flavour: str = "release") -> Path:
    return directory(flavour) / LIBRARY


def link_args(flavour: str = "release") -> list[str]:
    """The linker arguments that put the whole library into a program or shared object."""
    return ["-Wl,--whole-archive", str(library(flavour)), "-Wl,--no-whole-archive"]


def sources() -> list[Path]:
    return sorted(RUNTIME.glob("*.cpp"))


def _ninja() -> str:
    """ninja from the running Python's environment (torch requires it there), else from PATH. One
    build directory is best kept to one ninja: another version may not read its log and rebuild."""
    found = shutil.which("ninja", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found is None:
        raise RuntimeError("ninja is not installed: pip install ninja")
    return found


def _escape(path: Path | str) -> str:
    return str(path).replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _ninja_file(flavour: str) -> str:
    flags = " ".join(COMMON + FLAVOURS[flavour])
    lines = [
        "# Written by scripts/build_runtime.py: edit that, not this.",
        "ninja_required_version = 1.5",
        f"cxx = {os.environ.get('CXX', 'c++')}",
        f"cflags = {flags} -I{_escape(ROOT / 'csrc')}",
        f"warnings = {' '.join(RUNTIME_WARNINGS)}",
        "",
        "# The compiler's output stays beside the object (obj/<name>.o.log), so that warnings can be",
        "# checked after a build in which nothing needed compiling.",
        "rule cxx",
        "  command = $cxx $cflags $warnings -MMD -MF $out.d -c $in -o $out 2> $out.log; status=$$?; cat $out.log >&2; exit $$status",
        "  depfile = $out.d",
        "  deps = gcc",
        "  description = CXX $in",
        "rule ar",
        "  command = rm -f $out && ar rcs $out $in",
        "  description = AR $out",
        "rule program",
        f"  command = $cxx $cflags -MMD -MF $out.d $in -Wl,--whole-archive {LIBRARY} -Wl,--no-whole-archive -o $out",
        "  depfile = $out.d",
        "  deps = gcc",
        "  description = LINK $out",
        "",
    ]
    objects = []
    for source in sources():
        obj = f"obj/{source.stem}.o"
        objects.append(obj)
        lines.append(f"build {obj}: cxx {_escape(source)}")
    lines.append(f"build {LIBRARY}: ar {' '.join(objects)}")
    for program in sorted(NATIVE_TESTS.glob("*.cpp")):
        lines.append(f"build bin/{program.stem}: program {_escape(program)} | {LIBRARY}")
    lines.append(f"default {LIBRARY}")
    return "\n".join(lines) + "\n"


def build(flavour: str = "release", programs: tuple[str, ...] | list[str] = (), *, quiet: bool = False) -> Path:
    """Brings the library of `flavour` and the named native test programs up to date; returns the
    flavour's directory. `quiet`: ninja's output is kept and only shown (in the exception) if the
    build fails. Safe to call from concurrent processes (one builds, the others wait)."""
    out = directory(flavour)
    unknown = [p for p in programs if not (NATIVE_TESTS / f"{p}.cpp").is_file()]
    if unknown:
        raise ValueError(f"no native test program {', '.join(unknown)} in {NATIVE_TESTS}")
    (out / "obj").mkdir(parents=True, exist_ok=True)
    (out / "bin").mkdir(exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ninja_file = out / "build.ninja"
        text = _ninja_file(flavour)
        if not ninja_file.exists() or ninja_file.read_text() != text:
            ninja_file.write_text(text)
        cmd = [_ninja(), "-C", str(out)]
        if os.environ.get("MAX_JOBS"):
            cmd += ["-j", os.environ["MAX_JOBS"]]
        cmd += [LIBRARY, *(f"bin/{p}" for p in programs)]
        result = subprocess.run(cmd, capture_output=quiet, text=True)
    if result.returncode != 0:
        detail = f"\n{result.stdout}{result.stderr}" if quiet else ""
        raise RuntimeError(f"building the {flavour} runtime failed: {' '.join(cmd)}{detail}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("flavour", nargs="?", default="release", choices=sorted(FLAVOURS))
    parser.add_argument("--programs", nargs="*", default=[], metavar="NAME",
                        help="native test programs (tests/native/NAME.cpp) to link as well")
    args = parser.parse_args(argv)
    out = build(args.flavour, args.programs)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
