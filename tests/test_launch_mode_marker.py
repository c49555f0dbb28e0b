"""The ``launch_mode`` marker is on every test whose outcome can depend on how
kernels are launched.

The README's test command runs the whole suite in the default launch mode
(adaptive); CI then runs only the tests marked ``launch_mode`` again with
every kernel queued, with every kernel onto an idle stream run at once, and
with every launch waited for (``.ci/run``).  That is sound only if the marker
is where it must be, so this test reads every test function and fails on one
that touches what the launch mode changes without carrying the marker (on the
function, its class, or the module's ``pytestmark``).  The rule is in
docs/guide/testing.md.
"""

import ast
import pathlib
import re

TESTS = pathlib.Path(__file__).parent

# LITERALINCLUDE START: LAUNCH_MODE_RULE
# What a launch mode changes: when a kernel runs relative to the host, so
# streams, events, synchronisation, non-blocking and pinned copies, graphs
# (captured launches), injected faults (where they surface), memory statistics
# and pools (when frees land), the profiler's device track, and the mode itself.
LAUNCH_SENSITIVE = re.compile(
    r"(?i:(?<!up)stream|event)|non_blocking|pin_memory|is_pinned"
    r"|torch\.emu\.graph|EmuGraph|CUDAGraph|graph_pool|graphed"
    r"|\bfaults?\b|inject\("
    r"|memory_allocated|memory_reserved|memory_stats|max_memory|empty_cache"
    r"|memory_snapshot|record_memory_history|mem_get_info|MemPool"
    r"|profiler|profile\(|synchronize|\.query\(\)|LAUNCH_|launch_mode"
)
# LITERALINCLUDE END: LAUNCH_MODE_RULE


def _carries_marker(nodes, source: str) -> bool:
    return any("launch_mode" in ast.get_source_segment(source, node) for node in nodes)


def _module_marked(tree: ast.Module, source: str) -> bool:
    return any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        and "mark.launch_mode" in ast.get_source_segment(source, node.value)
        for node in tree.body
    )


def _unmarked_sensitive_tests(path: pathlib.Path):
    source = path.read_text()
    tree = ast.parse(source)
    if _module_marked(tree, source):
        return
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            if _carries_marker(node.decorator_list, source):
                continue
            functions = [(f"{node.name}.", f) for f in node.body]
        else:
            functions = [("", node)]
        for prefix, fn in functions:
            if not isinstance(fn, ast.FunctionDef) or not fn.name.startswith("test"):
                continue
            if _carries_marker(fn.decorator_list, source):
                continue
            found = LAUNCH_SENSITIVE.search(ast.get_source_segment(source, fn))
            if found:
                yield f"{path.name}::{prefix}{fn.name} ({found.group(0)!r})"


def test_every_launch_sensitive_test_carries_the_marker():
    files = [p for p in sorted(TESTS.glob("test_*.py")) if p.name != pathlib.Path(__file__).name]
    unmarked = [t for path in files for t in _unmarked_sensitive_tests(path)]
    assert not unmarked, (
        "these tests touch what the launch mode changes; mark them "
        "@pytest.mark.launch_mode so CI runs them in every mode:\n  " + "\n  ".join(unmarked)
    )


def test_the_check_sees_a_missing_marker(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "def test_plain():\n    assert 1\n"
        "def test_sync():\n    torch.emu.synchronize()\n"
        "@pytest.mark.launch_mode\ndef test_marked():\n    torch.emu.synchronize()\n"
        "class TestC:\n    def test_m(self):\n        torch.emu.Stream()\n"
    )
    found = list(_unmarked_sensitive_tests(tmp_path / "test_x.py"))
    assert found == ["test_x.py::test_sync ('synchronize')", "test_x.py::TestC.test_m ('Stream')"]
    (tmp_path / "test_y.py").write_text(
        "import pytest\npytestmark = [pytest.mark.launch_mode]\ndef test_s():\n    torch.emu.synchronize()\n"
    )
    assert list(_unmarked_sensitive_tests(tmp_path / "test_y.py")) == []
