"""Tools for vendors: which operators run natively, which through the
fallback (``fallback_report``), and a whole-library coverage table
(``coverage``, also ``python -m torch_emu coverage``)."""

from .coverage import coverage_table, operator_coverage
from .fallback_report import FallbackReport, fallback_report

__all__ = ["FallbackReport", "fallback_report", "operator_coverage", "coverage_table"]
