"""torch.compile and torch.export on emu: the Dynamo device interface
(``device_interface.py``), the Inductor backend (``inductor.py``) and the
memory format of fake convolutions (``fake_convolution.py``).

Both need ``torch._dynamo`` / ``torch._inductor``, which take a second or two
to import, so nothing here imports them: ``install`` only arranges for the two
modules to be loaded when PyTorch itself first needs them.
"""

import importlib
import importlib.util
import sys
from types import ModuleType

_DYNAMO_DEVICE_INTERFACE = "torch._dynamo.device_interface"
# The attributes of the device module that Inductor's init_backend_registration()
# reads for the PrivateUse1 backend (torch/_inductor/codegen/common.py), and
# the class of inductor.py each one is.
_INDUCTOR_HOOKS = {
    "Scheduling": "EmuScheduling",
    "PythonWrapperCodegen": "EmuWrapperCodegen",
    "CppWrapperCodegen": "EmuCppWrapperCodegen",
    "WrapperFxCodegen": "EmuFxWrapperCodegen",
}


def _register_device_interface() -> None:
    importlib.import_module(".device_interface", __name__)  # registers on import


# LITERALINCLUDE START: LAZY_REGISTRATION
class _AfterDynamoImport:
    """Import hook (sys.meta_path finder) that registers the emu device
    interface right after ``torch._dynamo.device_interface`` is executed.

    Dynamo has no lookup hook for PrivateUse1 devices (``get_interface_for_device``
    only reads its own registry), and registering eagerly would import Dynamo
    on ``import torch``. The finder removes itself on first use."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _DYNAMO_DEVICE_INTERFACE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        execute = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            _register_device_interface()

        spec.loader.exec_module = exec_module
        return spec


def _inductor_hook(name: str):
    """Module ``__getattr__`` of torch.emu: Inductor's first lookup of
    ``torch.emu.Scheduling`` (and friends) imports the backend."""
    if name in _INDUCTOR_HOOKS:
        from . import inductor

        return getattr(inductor, _INDUCTOR_HOOKS[name])
    raise AttributeError(f"module 'torch.emu' has no attribute '{name}'")


def install(device_module: ModuleType) -> None:
    """Called once by torch_emu/__init__.py with the torch.emu module."""
    from .fake_convolution import install as install_fake_convolution

    install_fake_convolution()  # fake_impls is loaded by import torch already
    if _DYNAMO_DEVICE_INTERFACE in sys.modules:  # Dynamo imported before torch_emu
        _register_device_interface()
    else:
        sys.meta_path.insert(0, _AfterDynamoImport())
    device_module.__getattr__ = _inductor_hook
# LITERALINCLUDE END: LAZY_REGISTRATION
