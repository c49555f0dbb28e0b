"""The legacy typed storage classes of ``torch.emu`` (``torch.emu.FloatStorage``...).

``Tensor.storage_type()`` looks the class up on the device's module, as
``torch.cuda.FloatStorage`` is for CUDA tensors, and ``isinstance(storage,
torch.emu.FloatStorage)`` matches a storage by device and dtype. PyTorch finds a
class's device from the last part of its module's name, so the classes say they
belong to ``torch_emu.emu`` (the ``torch.emu`` module), which exports them.
"""

import torch
from torch._utils import classproperty
from torch.storage import _LegacyStorage, _warn_typed_storage_removal

# LITERALINCLUDE START: LEGACY_STORAGE
# The dtypes torch.cuda has a legacy storage class for, by class name.
_DTYPES: dict[str, torch.dtype] = {
    "DoubleStorage": torch.double,
    "FloatStorage": torch.float,
    "HalfStorage": torch.half,
    "LongStorage": torch.long,
    "IntStorage": torch.int,
    "ShortStorage": torch.int16,
    "CharStorage": torch.int8,
    "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool,
    "BFloat16Storage": torch.bfloat16,
    "ComplexDoubleStorage": torch.cdouble,
    "ComplexFloatStorage": torch.cfloat,
}

_DEVICE_MODULE = __name__.rpartition(".")[0]  # "torch_emu.emu": its last part names the device


class _EmuLegacyStorage(_LegacyStorage):
    @classmethod
    def from_buffer(cls, *args, **kwargs):
        _warn_typed_storage_removal()
        raise RuntimeError("from_buffer: Not available for emu storage")

    @classmethod
    def _new_with_weak_ptr(cls, *args, **kwargs):
        raise RuntimeError("_new_with_weak_ptr: Not available for emu storage")

    @classmethod
    def _new_shared_filename(cls, manager, obj, size, *, device=None, dtype=None):
        raise RuntimeError("_new_shared_filename: Not available for emu storage")


def _storage_class(name: str, dtype: torch.dtype) -> type:
    def dtype_property(cls):
        _warn_typed_storage_removal()
        return dtype

    cls = type(
        name,
        (_EmuLegacyStorage,),
        {
            "dtype": classproperty(dtype_property),
            "_dtype": classproperty(lambda cls: dtype),
            "__module__": _DEVICE_MODULE,
            "__qualname__": name,
        },
    )
    torch._storage_classes.add(cls)  # torch.is_storage() knows it
    return cls


_CLASSES = {name: _storage_class(name, dtype) for name, dtype in _DTYPES.items()}
# LITERALINCLUDE END: LEGACY_STORAGE

globals().update(_CLASSES)
__all__ = list(_CLASSES)
