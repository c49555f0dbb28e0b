"""Emu tensors across processes: torch.multiprocessing support.

``torch.multiprocessing`` pickles tensors with its own ``reduce_tensor``,
which is device-generic for every device but CUDA: it sends the tensor's
metadata and its storage, and the storage goes through the reducer registered
for ``torch.UntypedStorage``. That reducer only knows CPU shared memory, so
torch-emu registers its own (the public ``ForkingPickler.register`` seam) and
hands every non-emu storage to torch's. Tensors therefore keep everything
torch's ``rebuild_tensor`` keeps: dtype, shape, strides, offset,
``requires_grad`` and the ``Parameter`` class.

An emu storage is sent as an IPC handle of its device memory plus a slot in a
cross-process reference count (``csrc/core/EmuIpc.cpp``); the receiver maps the
same device memory. Everything here runs only when a tensor is pickled, so
importing it costs nothing.
"""

import atexit
import os
import threading
from multiprocessing.reduction import ForkingPickler

import torch
from torch.multiprocessing import reductions

from . import _C

__all__ = ["ipc_collect"]


# LITERALINCLUDE START: IPC_REDUCE
def _rebuild_emu_storage(handle, storage_offset, storage_size, ref_counter, slot):
    # Sent to this process before (or sent by it): one mapping per storage, and
    # the reference that came with this message goes back at once.
    key = (handle, storage_offset)
    storage = reductions.storage_from_cache(torch.UntypedStorage, key)
    if storage is not None:
        _C._ipc_release_counter(ref_counter, slot)
        return storage
    torch.emu._lazy_init()
    _release_at_exit()
    try:
        storage = _C._ipc_open(handle, storage_offset, storage_size, ref_counter, slot)
    except Exception:
        # This process will never hold the memory: let the sender free it.
        _C._ipc_release_counter(ref_counter, slot)
        raise
    reductions.shared_cache[key] = reductions.StorageWeakRef(storage)
    return storage


def _rebuild_empty_emu_storage(device):
    return torch.UntypedStorage(0, device=device)


def _rebuild_ref_counter(sender, rebuild, args):
    # The reference counts are CPU shared memory reached through the sender
    # (its fd sharer, or its shared-memory file): gone once it has exited.
    try:
        return rebuild(*args)
    except (OSError, EOFError, RuntimeError) as e:
        raise RuntimeError(
            f"emu IPC: cannot receive an emu tensor from process {sender}: the sender has exited, and the "
            "reference count that keeps the tensor's memory alive went with it. Keep a sending process alive "
            "until its receivers have unpickled what it sent."
        ) from e


def _reduce_storage(storage):
    if storage.device.type != "emu":
        reduced = reductions.reduce_storage(storage)
        if getattr(storage, "_emu_ipc_ref_counter", False):
            return (_rebuild_ref_counter, (os.getpid(), *reduced))
        return reduced
    if storage.nbytes() == 0:
        return (_rebuild_empty_emu_storage, (storage.device,))
    handle, storage_offset, storage_size, ref_counter, slot = _C._ipc_share(storage)
    # A receiver in this very process finds the storage itself.
    reductions.shared_cache[(handle, storage_offset)] = reductions.StorageWeakRef(storage)
    # Pickled as an object, once per message however many storages share it
    # (above), so that its receiver can say why it cannot be rebuilt.
    ref_counter._emu_ipc_ref_counter = True
    return (_rebuild_emu_storage, (handle, storage_offset, storage_size, ref_counter, slot))


ForkingPickler.register(torch.UntypedStorage, _reduce_storage)
# LITERALINCLUDE END: IPC_REDUCE


_release_lock = threading.Lock()
_release_registered = False


def _release_at_exit():
    # Storages still alive when a receiver exits give their references back,
    # or their senders could never free the memory.
    global _release_registered
    with _release_lock:
        if not _release_registered:
            atexit.register(_C._ipc_release_received)
            _release_registered = True


# LITERALINCLUDE START: IPC_COLLECT_API
def ipc_collect() -> None:
    """Free the device memory of emu tensors that were sent to other processes,
    are dead here, and that no receiver holds any more (``torch.cuda.ipc_collect``).

    A sent tensor's memory stays allocated after the sender drops it, for as
    long as a receiver holds the tensor; it goes back to the caching allocator
    here (and whenever another tensor is sent).
    """
    _C._ipc_collect()
# LITERALINCLUDE END: IPC_COLLECT_API
