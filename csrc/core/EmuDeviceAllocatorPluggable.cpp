#include "core/EmuDeviceAllocator.h"
#include "core/EmuDeviceAllocatorState.h"

#include "core/EmuStream.h"

namespace torch_emu {

using c10::CachingAllocator::format_size;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::TraceEntry;

// LITERALINCLUDE START: PLUGGABLE
// With a pluggable allocator every allocation is a call to the user's alloc
// and every free a call to their free, as with CUDAPluggableAllocator; the
// statistics still count them (allocated = reserved: nothing is cached).
void EmuDeviceAllocator::setPluggable(std::shared_ptr<PluggableAllocatorFns> fns) {
  TORCH_CHECK(fns != nullptr && fns->alloc != nullptr && fns->free != nullptr,
              "emu allocator: a pluggable allocator needs an alloc and a free function");
  TORCH_CHECK(!allocated_once_.load() && pluggable_ == nullptr,
              "emu allocator: can't swap an already initialized allocator: change_current_allocator "
              "must be called before the first emu allocation of the process");
  pluggable_ = std::move(fns);
}

c10::DataPtr EmuDeviceAllocator::allocate_pluggable(size_t nbytes, c10::DeviceIndex device) {
  const c10::Stream stream = current_stream(device);
  void* ptr = pluggable_->alloc(nbytes, device, native_stream(stream));
  DeviceCache& dc = cache(device);
  if (ptr == nullptr) {
    CacheLock guard(dc);
    raise_oom(dc, nbytes, stream);
  }
  if (!is_device_ptr(ptr)) {
    pluggable_->free(ptr, nbytes, device, native_stream(stream));
    TORCH_CHECK(false, "emu allocator: the pluggable allocator returned ", ptr,
                ", which is not emu device memory (allocate it with emuMalloc)");
  }
  // A Block records size and stream for the user's free; it is never cached.
  auto* block = new Block(stream, nbytes, small_request(nbytes), ptr);
  block->allocated = true;
  {
    CacheLock guard(dc);
    for (auto* stat : {&dc.stats.allocation, &dc.stats.segment, &dc.stats.active}) {
      update_stat(*stat, block->small, 1);
    }
    for (auto* stat : {&dc.stats.allocated_bytes, &dc.stats.reserved_bytes, &dc.stats.active_bytes,
                       &dc.stats.requested_bytes}) {
      update_stat(*stat, block->small, static_cast<int64_t>(nbytes));
    }
    dc.stats.num_device_alloc += 1;
    report_to_profiler(dc, ptr, static_cast<int64_t>(nbytes));
    dc.allocated.emplace(ptr, block);
  }
  return {ptr, ptr, &deleter, c10::Device(c10::DeviceType::PrivateUse1, device)};
}

void EmuDeviceAllocator::free_pluggable(void* ptr) {
  const LiveBlock live = lock_live_block(ptr, /*take=*/true);
  TORCH_CHECK(live.block != nullptr, "emu allocator: invalid device pointer ", ptr);
  live.cache->mutex.unlock(); // the user's free runs without it
  Block* block = live.block;
  const c10::DeviceIndex device = block->stream.device_index();
  pluggable_->free(ptr, block->size, device, native_stream(block->stream));
  DeviceCache& dc = cache(device);
  CacheLock guard(dc);
  for (auto* stat : {&dc.stats.allocation, &dc.stats.segment, &dc.stats.active}) {
    update_stat(*stat, block->small, -1);
  }
  for (auto* stat : {&dc.stats.allocated_bytes, &dc.stats.reserved_bytes, &dc.stats.active_bytes,
                     &dc.stats.requested_bytes}) {
    update_stat(*stat, block->small, -static_cast<int64_t>(block->size));
  }
  dc.stats.num_device_free += 1;
  report_to_profiler(dc, ptr, -static_cast<int64_t>(block->size));
  delete block;
}
// LITERALINCLUDE END: PLUGGABLE

} // namespace torch_emu
