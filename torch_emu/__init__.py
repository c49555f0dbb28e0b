"""torch-emu: a complete PrivateUse1 accelerator backend for PyTorch on an
emulated device.

Importing this package (which ``import torch`` does by itself through the
``torch.backends`` entry point, unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``)
loads the native extension, which registers the device guard, hooks,
allocators, generator and kernels for ``PrivateUse1``; then names the backend
``emu`` and installs the ``torch.emu`` device module.
"""

# LITERALINCLUDE START: AUTOLOAD
def _autoload() -> None:
    """Entry point of the ``torch.backends`` group, called by ``import torch``.

    Importing this package does all the work. It is defined before ``import
    torch`` below: when a program imports torch_emu first, that import of
    torch autoloads this very entry point while torch_emu is still half
    initialised, and the function must already exist then.
    """


# LITERALINCLUDE END: AUTOLOAD
import torch  # noqa: E402

# LITERALINCLUDE START: BACKEND_REGISTRATION
from . import _C  # noqa: F401  (static registrations run when the library loads)
from .runtime import install_from_environment as _install_runtime  # noqa: E402

_install_runtime()  # TORCH_EMU_RUNTIME: which runtime implements the device (native by default)

torch.utils.rename_privateuse1_backend("emu")

from . import emu as _device_module  # noqa: E402

torch._register_device_module("emu", _device_module)
# tensor.emu(), tensor.is_emu, module.emu(), storage.emu(), packed_sequence.emu()
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_storage=True, for_packed_sequence=True
)
# LITERALINCLUDE END: BACKEND_REGISTRATION

from .backward_thread import install as _install_backward_thread  # noqa: E402

_install_backward_thread()  # backward of emu tensors on the calling thread, of emu's only

from .tools.fallback_report import configure_from_environment  # noqa: E402

configure_from_environment()  # TORCH_EMU_FALLBACK_REPORT / TORCH_EMU_FALLBACK_ERROR

__version__ = "0.1.0"
from .serialization import get_format_tag, set_format_tag  # noqa: E402,F401  (also makes deepcopy and safetensors emu-aware)
from .storage import StorageDesc, storage_desc  # noqa: E402,F401
from .compile import install as _install_compile  # noqa: E402

_install_compile(_device_module)  # torch.compile / torch.export on emu, loaded on first use

# LITERALINCLUDE START: DIST_AUTOLOAD
from .distributed import register as _register_distributed  # noqa: E402

_register_distributed()  # emu_gloo: the default c10d backend of emu; its code loads on first use
# LITERALINCLUDE END: DIST_AUTOLOAD
