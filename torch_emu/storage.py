"""The emu storage descriptor: what torch-emu keeps per device allocation.

Every emu storage is an ``EmuStorageImpl`` (``csrc/core/EmuStorageImpl.{h,cpp}``),
including the ones PyTorch creates itself (``torch.UntypedStorage(n,
device="emu")``, ``storage.clone()``, ``copy.deepcopy``, ``torch.load``). It
carries a :class:`StorageDesc`, shared by every tensor and view over the
storage. The format tag of :mod:`torch_emu.serialization` is different: it
belongs to one tensor object, not to the memory.
"""

from typing import NamedTuple, Optional, Union

import torch

from . import _C

__all__ = ["StorageDesc", "storage_desc"]


# LITERALINCLUDE START: STORAGE_DESC_API
class StorageDesc(NamedTuple):
    """``id``: serial number of the storage, unique in the process; tensors
    with the same id share memory. ``stream``: the stream its device memory
    was allocated on (``None`` for a zero-byte storage, or a slice of another
    storage, which own no allocation of their own)."""

    id: int
    stream: Optional[torch.Stream]


def storage_desc(obj: Union[torch.Tensor, torch.UntypedStorage, torch.TypedStorage]) -> StorageDesc:
    """The descriptor of the storage of the emu tensor or storage ``obj``.

    Raises ``TypeError`` for anything but a tensor or storage, and
    ``RuntimeError`` for one that is not on an emu device or has no storage.
    """
    if isinstance(obj, torch.Tensor):
        obj = obj.untyped_storage()
    elif isinstance(obj, torch.TypedStorage):
        obj = obj._untyped_storage
    if not isinstance(obj, torch.UntypedStorage):
        raise TypeError(f"storage_desc expects an emu tensor or storage, got {type(obj).__name__}")
    storage_id, stream = _C._storage_desc(obj)
    if stream is not None:
        stream_id, device_index, device_type = stream
        stream = torch.emu.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
    return StorageDesc(storage_id, stream)
# LITERALINCLUDE END: STORAGE_DESC_API
