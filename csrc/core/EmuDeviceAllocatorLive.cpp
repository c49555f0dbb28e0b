// The caching allocator's live allocations: the block behind a data pointer
// (for a free, recordStream, allocation_stream, raw_delete). Each device's
// cache keeps its own, under its mutex (EmuDeviceAllocatorState.h).
#include "core/EmuDeviceAllocator.h"
#include "core/EmuDeviceAllocatorState.h"

#include <optional>

#include "core/EmuStream.h"

namespace torch_emu {

EmuDeviceAllocator::LiveBlock EmuDeviceAllocator::lock_live_block(const void* ptr, bool take) {
  // Most frees are of the current device's memory: its cache is asked first.
  const c10::DeviceIndex count = device_count();
  const c10::DeviceIndex first = count > 1 ? current_device() : 0;
  for (c10::DeviceIndex i = 0; i < count; ++i) {
    DeviceCache& dc = cache(static_cast<c10::DeviceIndex>((first + i) % count));
    dc.mutex.lock();
    if (auto it = dc.allocated.find(const_cast<void*>(ptr)); it != dc.allocated.end()) {
      Block* block = it->second;
      if (take) {
        dc.allocated.erase(it);
      }
      return {&dc, block};
    }
    dc.mutex.unlock();
  }
  return {nullptr, nullptr};
}

Block* EmuDeviceAllocator::find_block(const void* ptr) {
  const LiveBlock live = lock_live_block(ptr, /*take=*/false);
  if (live.cache != nullptr) {
    live.cache->mutex.unlock();
  }
  return live.block;
}

std::optional<c10::Stream> EmuDeviceAllocator::allocation_stream(const void* ptr) {
  if (ptr == nullptr) {
    return std::nullopt;
  }
  // A block's stream never changes while it is allocated.
  const Block* block = find_block(ptr);
  return block != nullptr ? std::optional<c10::Stream>(block->stream) : std::nullopt;
}

} // namespace torch_emu
