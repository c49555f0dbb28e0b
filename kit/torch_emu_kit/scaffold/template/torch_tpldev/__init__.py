"""torch_tpldev: the tpldev accelerator for PyTorch, on the PrivateUse1 dispatch key.

``import torch`` imports this package through the ``torch.backends`` entry point
(see pyproject.toml) unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``. Importing it loads
the native library, whose static registrations install the device guard,
allocator, hooks, generator and operators; then names the backend ``tpldev`` and
installs the ``torch.tpldev`` device module.
Guide: torch-emu docs/guide/registration.md
"""


# LITERALINCLUDE START: AUTOLOAD
def _autoload() -> None:
    """Called by ``import torch``: importing this package did the work already.

    Defined before ``import torch`` below: if a program imports torch_tpldev
    first, that ``import torch`` calls this function while the package is
    still loading.
    """


# LITERALINCLUDE END: AUTOLOAD
import torch  # noqa: E402

# LITERALINCLUDE START: REGISTRATION
from . import _C  # noqa: E402,F401  (loading it runs the C++ registrations)

torch.utils.rename_privateuse1_backend("tpldev")

from . import device as _device_module  # noqa: E402

torch._register_device_module("tpldev", _device_module)
# tensor.tpldev(), tensor.is_tpldev, module.tpldev(), storage.tpldev(), ...
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_storage=True, for_packed_sequence=True
)
# LITERALINCLUDE END: REGISTRATION

__version__ = "0.1.0"
