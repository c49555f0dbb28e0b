"""The legacy typed storage names of ``torch.emu`` (``torch.emu.FloatStorage``...).

``Tensor.storage_type()`` looks the class up on the device's module by name, and gives ``None``
when the module lacks it. CUDA has classes of its own (``torch.cuda.FloatStorage``); PyTorch's
own tests (``test_torch.py``'s ``test_tensor_storage_type``) expect torch's classes
(``torch.FloatStorage``) for the tensors of every other device, so these names are torch's
classes. The storages themselves are emu storages (``TypedStorage`` with ``device.type ==
"emu"``); the legacy classes only name a dtype.
"""

import torch

# LITERALINCLUDE START: LEGACY_STORAGE
# The dtypes torch has a legacy storage class for, by class name (torch.cuda has the same 12).
_NAMES = [
    "DoubleStorage", "FloatStorage", "HalfStorage", "LongStorage", "IntStorage", "ShortStorage", "CharStorage",
    "ByteStorage", "BoolStorage", "BFloat16Storage", "ComplexDoubleStorage", "ComplexFloatStorage",
]
globals().update({name: getattr(torch, name) for name in _NAMES})
# LITERALINCLUDE END: LEGACY_STORAGE

__all__ = list(_NAMES)
