"""Which operators went through the emu fallback during a run, how often and
for how long; optionally, every fallback as an error."""

import atexit
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from .. import _C
from ..runtime.config import env_flag

__all__ = ["FallbackReport", "fallback_report"]


@dataclass
class FallbackReport:
    """Operators that ran through the fallback: (name, calls, seconds), most
    time first. Filled when the ``fallback_report`` block ends."""

    records: list[tuple[str, int, float]] = field(default_factory=list)

    @property
    def ops(self) -> list[str]:
        return [name for name, _, _ in self.records]

    def table(self) -> str:
        total_calls = sum(calls for _, calls, _ in self.records)
        total_time = sum(seconds for _, _, seconds in self.records)
        lines = [
            f"emu fallback report: {len(self.records)} operators, {total_calls} calls, {total_time * 1e3:.2f} ms",
            f"{'operator':<48}{'calls':>10}{'total ms':>12}{'µs/call':>10}",
        ]
        for name, calls, seconds in self.records:
            lines.append(f"{name:<48}{calls:>10}{seconds * 1e3:>12.3f}{seconds * 1e6 / calls:>10.2f}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


# LITERALINCLUDE START: FALLBACK_REPORT
@contextmanager
def fallback_report(error: bool = False) -> Iterator[FallbackReport]:
    """Records every operator that runs through the fallback inside the block.

    ``error=True`` instead makes every fallback raise ``NotImplementedError``,
    to find the first operator that still lacks an emu kernel::

        with torch_emu.tools.fallback_report() as report:
            model(x).sum().backward()
        print(report.table())
    """
    report = FallbackReport()
    _C._take_fallback_records()  # start from an empty record
    _C._set_fallback_recording(True)
    _C._set_fallback_error(error)
    try:
        yield report
    finally:
        _C._set_fallback_error(env_flag("TORCH_EMU_FALLBACK_ERROR"))
        _C._set_fallback_recording(env_flag("TORCH_EMU_FALLBACK_REPORT"))
        report.records = [(name, calls, ns / 1e9) for name, calls, ns in _C._take_fallback_records()]
# LITERALINCLUDE END: FALLBACK_REPORT


def _print_report_at_exit() -> None:
    _C._set_fallback_recording(False)
    records = [(name, calls, ns / 1e9) for name, calls, ns in _C._take_fallback_records()]
    print(FallbackReport(records).table(), file=sys.stderr)


def configure_from_environment() -> None:
    """TORCH_EMU_FALLBACK_REPORT=1 prints a report for the whole process at
    exit; TORCH_EMU_FALLBACK_ERROR=1 makes every fallback an error."""
    report, error = env_flag("TORCH_EMU_FALLBACK_REPORT"), env_flag("TORCH_EMU_FALLBACK_ERROR")  # both checked first
    if report:
        _C._set_fallback_recording(True)
        atexit.register(_print_report_at_exit)
    if error:
        _C._set_fallback_error(True)
