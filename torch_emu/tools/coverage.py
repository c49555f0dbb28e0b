"""How emu runs every aten operator: a native emu kernel, the CPU fallback,
a composite (decomposed into other operators), or not at all."""

import json
from collections import Counter

import torch

from .. import _C

__all__ = ["operator_coverage", "coverage_table"]

KINDS = ("native", "fallback", "composite", "unsupported")


# LITERALINCLUDE START: COVERAGE
def _classify(name: str, routed: set[str]) -> str:
    has = lambda key: torch._C._dispatch_has_kernel_for_dispatch_key(name, key)  # noqa: E731
    if name in routed:
        return "fallback"  # registered as the fallback itself (structured ops)
    if has("PrivateUse1"):
        return "native"
    if has("CompositeImplicitAutograd") or has("CompositeExplicitAutograd") or has(
        "CompositeExplicitAutogradNonFunctional"
    ):
        return "composite"
    if has("CPU"):
        return "fallback"  # the global fallback runs CPU's kernel on device memory
    return "unsupported"


def operator_coverage() -> dict[str, str]:
    """Every aten operator (with overload) mapped to one of ``KINDS``."""
    routed = set(_C._fallback_routed_ops())
    names = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::"))
    return {name: _classify(name, routed) for name in names}
# LITERALINCLUDE END: COVERAGE


def coverage_table(as_json: bool = False, kind: str | None = None) -> str:
    """The coverage as a text table (totals first), or as JSON."""
    coverage = operator_coverage()
    totals = Counter(coverage.values())
    if as_json:
        return json.dumps({"totals": {k: totals[k] for k in KINDS}, "operators": coverage}, indent=1)
    lines = [f"emu operator coverage: {len(coverage)} aten operators"]
    lines += [f"  {k:<12}{totals[k]:>6}" for k in KINDS]
    lines.append("")
    lines.append(f"{'operator':<64}how emu runs it")
    lines += [f"{name:<64}{how}" for name, how in coverage.items() if kind is None or how == kind]
    return "\n".join(lines)
