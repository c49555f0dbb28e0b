// Sharing emu storages with other processes (torch.multiprocessing).
//
// The runtime gives an allocation an IPC handle (emu_runtime_ipc.h); this
// layer does what torch does on top of cudaIpc* for CUDA tensors: a storage is
// sent as (handle of the caching allocator's segment, offset and size of the
// storage inside it), and a cross-process reference count keeps the sender's
// memory from being reused while a receiver holds it.
//
// The counts live in CPU shared memory (pages of int64 slots, torch's own
// shared CPU storages, which torch.multiprocessing already knows how to send).
// Each send adds one to the storage's slot; the receiver subtracts one when
// its storage dies (or at once, if the process already had the storage). When
// the sender's storage dies with its count above zero, its memory waits in a
// "limbo" until ipc_collect() finds the count back at zero.
#pragma once

#include <c10/core/Storage.h>

#include <cstddef>
#include <string>

namespace torch_emu {

// LITERALINCLUDE START: IPC_SHARE_STRUCT
// What the receiving process needs to rebuild a shared emu storage.
struct IpcShare {
  std::string handle;         // the emuIpcMemHandle_t of the allocation holding the storage
  size_t storage_offset = 0;  // bytes from the allocation's start
  size_t storage_size = 0;    // bytes
  c10::Storage ref_counter;   // CPU shared memory: the page of reference counts
  size_t ref_counter_slot = 0;
};
// LITERALINCLUDE END: IPC_SHARE_STRUCT

// Sender: makes `storage` (an emu storage of non-zero size) shareable, adds
// one reference for the receiver and waits for the device's queued work, so
// the receiver sees what was written before the call.
IpcShare share_storage(const c10::Storage& storage);

// Receiver: maps the memory of `share` and wraps it in a non-resizable emu
// storage that gives its reference back when it dies.
c10::Storage open_shared_storage(const IpcShare& share);

// Gives back one reference (a receiver that already had the storage).
void release_ref_counter(const c10::Storage& ref_counter, size_t slot);

// Sender: frees the memory of dead storages that no receiver holds any more.
// Returns how many allocations were freed.
size_t ipc_collect();

// Receiver, at exit: gives back the references of the storages still alive,
// so that the senders can free their memory.
void release_received_storages();

} // namespace torch_emu
