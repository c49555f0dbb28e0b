// The storage of every emu tensor: a c10::StorageImpl subclass that carries
// what the backend keeps per device allocation, registered for PrivateUse1
// with c10::SetStorageImplCreate so that the storages PyTorch itself creates
// for emu (torch.UntypedStorage(n, device="emu"), storage.clone(), the
// storages torch.load and copy.deepcopy restore) are emu storages too.
//
// Storage-level versus tensor-level metadata: this descriptor belongs to the
// memory, so every tensor and view over it sees the same one; the format tag
// (EmuSerialization.h) is a c10::BackendMeta of one TensorImpl.
#pragma once

#include <c10/core/Storage.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <optional>

namespace torch_emu {

// LITERALINCLUDE START: STORAGE_IMPL
struct EmuStorageImpl final : c10::StorageImpl {
  EmuStorageImpl(use_byte_size_t, c10::SymInt size_bytes, c10::DataPtr data, c10::Allocator* allocator,
                 bool resizable);

  // Serial number of this storage, unique in the process. Views, set_(),
  // resize_() and untyped_storage() keep it; clone, copies to emu and
  // torch.load create a new storage and so a new id.
  const uint64_t id;

  // The stream the device memory was allocated on: the stream whose cache the
  // caching allocator returns it to, and the one record_stream() is relative
  // to. nullopt when the storage owns no block (zero bytes, or a slice of
  // another storage: storage[2:5]). Asked of the allocator, not copied here:
  // a storage's memory can be replaced without the storage being told
  // (PyTorch's copy-on-write materialisation), and a copy would go stale.
  std::optional<c10::Stream> stream() const;
};
// LITERALINCLUDE END: STORAGE_IMPL

// A new emu storage over `data` (emu device memory of `nbytes`), resizable
// through the emu allocator: how emu's own ops make storages.
c10::Storage emu_storage(c10::DataPtr data, size_t nbytes);

// Grows or shrinks an emu storage to `new_bytes`, keeping the common prefix
// (copied on the current stream of the storage's device): resize_() and set_()
// of the minimal operators, and the hooks' resizePrivateUse1Bytes
// (untyped_storage().resize_()).
void resize_storage_bytes(c10::StorageImpl* storage, size_t new_bytes);

// The emu descriptor of `storage`, or nullptr for a storage created
// elsewhere (a CPU storage, at::from_blob over emu memory).
const EmuStorageImpl* emu_storage_impl(const c10::Storage& storage);

} // namespace torch_emu
