"""The C++ source layout. The folders are layers, and a layer includes only from itself and the layers below it:
runtime (the device driver, no torch) < core (PyTorch's device integration) < aten, profiler,
distributed (operators and features on top of the core) < python (the bindings). Inside
csrc/core, no module (a .h and its .cpp) includes, directly or not, one that includes it. Every kernel registered for an operator lives in csrc/aten/kernels
(the rule for static and switchable registration: docs/guide/operators.md). See
docs/architecture.md."""

import collections
import pathlib
import re

CSRC = pathlib.Path(__file__).parent.parent / "csrc"
LAYER = {"runtime": 0, "core": 1, "aten": 2, "profiler": 2, "distributed": 2, "python": 3}


def includes() -> dict[pathlib.PurePosixPath, set[str]]:
    """Each source file under csrc/ (relative) and the project headers it includes."""
    return {
        path.relative_to(CSRC): set(re.findall(r'^#include "([^"]+)"', path.read_text(), re.M))
        for path in CSRC.rglob("*") if path.suffix in (".h", ".cpp")
    }


def test_no_include_from_a_lower_layer_to_a_higher_one():
    upward = [f"{source} includes {header}"
              for source, headers in includes().items() for header in headers
              if LAYER[header.split("/")[0]] > LAYER[source.parts[0]]]
    assert not upward, "\n".join(upward)


def test_no_module_of_the_core_includes_one_that_includes_it():
    uses = collections.defaultdict(set)
    for source, headers in includes().items():
        if source.parts[0] == "core":
            uses[source.stem] |= {pathlib.PurePosixPath(h).stem for h in headers if h.startswith("core/")} - {source.stem}
    # A module that reaches itself through the modules it uses is in a cycle, of any length.
    def reaches(start):
        seen, todo = set(), list(uses[start])
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(uses[module])
        return seen
    cyclic = sorted(module for module in list(uses) if module in reaches(module))
    assert not cyclic, f"modules of csrc/core in an include cycle: {cyclic}"


# Outside csrc/aten/kernels, only these register with the dispatcher: the boxed fallback of every
# op (a kernel for no operator in particular) and autocast's policies (which cast, then redispatch).
NOT_KERNELS = {"aten/EmuFallback.cpp", "aten/EmuAutocast.cpp"}


def test_every_operator_kernel_lives_in_aten_kernels():
    registering = {str(path.relative_to(CSRC)) for path in CSRC.rglob("*.cpp")
                   if re.search(r"TORCH_LIBRARY_IMPL|torch::Library::IMPL", path.read_text())}
    outside = sorted(p for p in registering if not p.startswith("aten/kernels/") and p not in NOT_KERNELS)
    assert not outside, f"operator kernels outside csrc/aten/kernels: {outside}"


def test_no_source_file_over_about_600_lines():
    # One concern per file: past this, a file holds more than one (split it by concern).
    long = {str(path.relative_to(CSRC)): n for path in CSRC.rglob("*") if path.suffix in (".h", ".cpp")
            if (n := len(path.read_text().splitlines())) > 650}
    assert not long, f"source files over 650 lines: {long}"
