"""Operator registrations written in Python: the twins of csrc/aten/scenarios/.

Importing this package defines the ``emu_py::`` custom operators and the
Python-defined operators of the ``emu::`` namespace. Python kernels for
built-in aten operators (:mod:`.native_python`, :mod:`.fallbacks`,
:mod:`.overrides`) are prototypes: they are only registered inside their
context managers, never by default. See docs/guide/registration.md.
"""

from . import custom_ops, fallbacks, native_python, overrides  # noqa: F401
