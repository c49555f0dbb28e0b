"""Which runtime implements the emu device, and the interface to write one.

The native runtime (C++, ``csrc/runtime``) is the default. ``TORCH_EMU_RUNTIME``
chooses another for a whole program: ``python`` is the reference runtime of
this package (``reference.py``); ``module:attribute`` names a
:class:`Runtime` subclass or factory of your own. :func:`install` does the
same from code, before the first use of an emu device.
"""

from __future__ import annotations

import atexit
import importlib
import os

from .. import _C
from .interface import DeviceProperties, EmuError, Error, MemcpyKind, MemoryType, Runtime, Work

__all__ = ["DeviceProperties", "EmuError", "Error", "MemcpyKind", "MemoryType", "Runtime", "Work", "active",
           "install"]


# LITERALINCLUDE START: RUNTIME_INSTALL
def install(runtime: Runtime) -> None:
    """Makes ``runtime`` the emu device, for the rest of the process. Raises
    ``torch.AcceleratorError`` once a device has been used (or another
    runtime installed): memory and streams cannot change hands."""
    if not isinstance(runtime, Runtime):
        raise TypeError(f"install() takes a torch_emu.runtime.Runtime, not {type(runtime).__name__}")
    _C._install_python_runtime(runtime, EmuError)
    # After this, Python may be gone when C++ frees what is left: from then on
    # releases succeed without Python and other calls fail cleanly.
    atexit.register(_C._shutdown_python_runtime)
# LITERALINCLUDE END: RUNTIME_INSTALL


def active() -> str:
    """The installed runtime's name: ``"native"``, ``"python"``..."""
    return _C._runtime_name()


def _from_spec(spec: str) -> Runtime:
    if spec == "python":
        from .reference import ReferenceRuntime

        return ReferenceRuntime()
    expected = ("expected 'native', 'python' or 'module:attribute' naming a torch_emu.runtime.Runtime subclass "
                "or factory")
    module, _, attribute = spec.partition(":")
    if not module or not attribute:
        raise ValueError(f"TORCH_EMU_RUNTIME={spec!r}: {expected}")
    try:
        factory = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"TORCH_EMU_RUNTIME={spec!r}: {e}; {expected}") from e
    if not callable(factory):
        raise TypeError(f"TORCH_EMU_RUNTIME={spec!r}: {module}.{attribute} is not callable (type "
                        f"{type(factory).__name__}); {expected}")
    runtime = factory()
    if not isinstance(runtime, Runtime):
        raise TypeError(f"TORCH_EMU_RUNTIME={spec!r}: {module}.{attribute}() returned a value of type "
                        f"{type(runtime).__name__}, not a torch_emu.runtime.Runtime")
    return runtime


def install_from_environment() -> None:
    spec = os.environ.get("TORCH_EMU_RUNTIME", "native").strip()
    if spec not in ("", "native"):
        install(_from_spec(spec))
