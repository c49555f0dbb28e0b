"""The C++ folders are layers, and a layer includes only from itself and the layers below it:
runtime (the device driver, no torch) < core (PyTorch's device integration) < aten, profiler,
distributed (operators and features on top of the core) < python (the bindings). Inside
csrc/core, no two modules (a .h and its .cpp) include each other. See docs/architecture.md."""

import collections
import pathlib
import re

CSRC = pathlib.Path(__file__).parent.parent / "csrc"
LAYER = {"runtime": 0, "core": 1, "aten": 2, "profiler": 2, "distributed": 2, "python": 3}

# Cycles inside csrc/core not untangled yet; the test fails when one is gone, so that the
# list only shrinks.
KNOWN_CORE_CYCLES = {
    ("EmuDeviceAllocator", "EmuIpc"),
    ("EmuDeviceAllocator", "EmuLaunch"),
    ("EmuGraph", "EmuLaunch"),
}


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
    cycles = {tuple(sorted((a, b))) for a in uses for b in uses[a] if a in uses[b]}
    assert cycles - KNOWN_CORE_CYCLES == set(), f"new include cycles in csrc/core: {cycles - KNOWN_CORE_CYCLES}"
    assert KNOWN_CORE_CYCLES - cycles == set(), f"untangled, remove from KNOWN_CORE_CYCLES: {KNOWN_CORE_CYCLES - cycles}"
