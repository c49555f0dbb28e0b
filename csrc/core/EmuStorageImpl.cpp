#include "core/EmuStorageImpl.h"

#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <atomic>

#include "core/EmuDeviceAllocator.h"
#include "core/EmuException.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

std::atomic<uint64_t> next_storage_id{1};

} // namespace

// LITERALINCLUDE START: STORAGE_IMPL_CTOR
EmuStorageImpl::EmuStorageImpl(use_byte_size_t, c10::SymInt size_bytes, c10::DataPtr data,
                               c10::Allocator* allocator, bool resizable)
    : c10::StorageImpl(use_byte_size_t(), std::move(size_bytes), std::move(data), allocator, resizable),
      id(next_storage_id.fetch_add(1, std::memory_order_relaxed)) {}

std::optional<c10::Stream> EmuStorageImpl::stream() const {
  return device_allocator()->allocation_stream(data_ptr().get());
}
// LITERALINCLUDE END: STORAGE_IMPL_CTOR

// LITERALINCLUDE START: STORAGE_IMPL_CREATE
namespace {

// What c10::make_storage_impl calls for a PrivateUse1 device instead of
// constructing a plain StorageImpl. `data` is empty when PyTorch asks for new
// memory (torch.UntypedStorage(n, device="emu"), which storage.clone(),
// deepcopy and torch.load use); it is set when PyTorch wraps memory that
// exists (storage slices, copy-on-write clones).
c10::intrusive_ptr<c10::StorageImpl> make_emu_storage_impl(c10::StorageImpl::use_byte_size_t,
                                                           c10::SymInt size_bytes, c10::DataPtr data,
                                                           c10::Allocator* allocator, bool resizable) {
  if (data == nullptr) {
    data = allocator->allocate(size_bytes.is_heap_allocated() ? 0 : size_bytes.as_int_unchecked());
  }
  return c10::make_intrusive<EmuStorageImpl>(c10::StorageImpl::use_byte_size_t(), std::move(size_bytes),
                                             std::move(data), allocator, resizable);
}

// At library load; only PrivateUse1 may register a creator.
const bool storage_impl_registered = [] {
  c10::SetStorageImplCreate(c10::DeviceType::PrivateUse1, &make_emu_storage_impl);
  return true;
}();

} // namespace

// ATen's at::detail::empty_generic builds a plain StorageImpl without asking
// the registered creator, so emu's own allocating ops build theirs here.
c10::Storage emu_storage(c10::DataPtr data, size_t nbytes) {
  return c10::Storage(c10::make_intrusive<EmuStorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                          std::move(data), device_allocator(),
                                                          /*resizable=*/true));
}
// LITERALINCLUDE END: STORAGE_IMPL_CREATE

const EmuStorageImpl* emu_storage_impl(const c10::Storage& storage) {
  return dynamic_cast<const EmuStorageImpl*>(storage.unsafeGetStorageImpl());
}

// LITERALINCLUDE START: RESIZE_STORAGE_BYTES
void resize_storage_bytes(c10::StorageImpl* storage, size_t new_bytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const size_t old_bytes = storage->nbytes();
  if (new_bytes == old_bytes) {
    return;
  }
  const c10::DeviceGuard guard(storage->device());
  c10::Allocator* allocator = storage->allocator() != nullptr ? storage->allocator() : device_allocator();
  at::DataPtr data = allocator->allocate(new_bytes);
  const size_t keep = std::min(old_bytes, new_bytes);
  if (keep > 0) {
    EMU_CHECK(emuMemcpyAsync(data.get(), storage->data(), keep, emuMemcpyDeviceToDevice,
                             native_stream(current_stream(storage->device().index()))));
  }
  // The old block goes back to the cache, ordered after the copy on this stream.
  storage->set_data_ptr_noswap(std::move(data));
  storage->set_nbytes(new_bytes);
}
// LITERALINCLUDE END: RESIZE_STORAGE_BYTES

} // namespace torch_emu
