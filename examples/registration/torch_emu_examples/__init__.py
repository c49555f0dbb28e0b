"""torch-emu's operator registration examples (docs/guide/registration.md): every
way a backend registers something for one operator, in C++ (csrc/, built into
this package's own extension) and in Python (the modules beside this file).

They are teaching code, not part of the backend: they replace kernels emu
ships (hardswish, fill_, abs.out, square, histc, to_mkldnn) and define the
``emu::`` and ``emu_py::`` example operators, so they load only when this
package is imported. Built by ``scripts/setup.sh`` or
``pip install --no-build-isolation -e examples/registration``.
"""

import ctypes
import os

import torch  # noqa: F401
import torch_emu

# LITERALINCLUDE START: EXAMPLES_LOAD
# The C++ examples launch kernels with the backend's own functions (streams,
# launches, host aliases) without linking to its library: make torch_emu._C's
# symbols global (it is loaded already; RTLD_NOLOAD only changes its scope),
# then load ours, whose static registrations run as it loads.
ctypes.CDLL(torch_emu._C.__file__, mode=os.RTLD_GLOBAL | os.RTLD_NOLOAD)
from . import _C  # noqa: E402,F401
# LITERALINCLUDE END: EXAMPLES_LOAD

from . import custom_ops, fallbacks, native_python, overrides  # noqa: E402,F401
