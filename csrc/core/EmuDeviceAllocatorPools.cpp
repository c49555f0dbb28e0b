#include "core/EmuDeviceAllocator.h"
#include "core/EmuDeviceAllocatorState.h"

#include <algorithm>
#include <atomic>

#include "core/EmuException.h"
#include "core/EmuKernelContext.h"
#include "core/EmuStream.h"

namespace torch_emu {

using c10::CachingAllocator::format_size;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::TraceEntry;

// Gives every cached, unsplit segment of one pool back to where it came from
// (the runtime, or the pool's pluggable allocator). Split segments stay: part
// of them is still in use.
void release_pool_segments(DeviceCache& dc, PrivatePool* private_pool) {
  for (bool small : {true, false}) {
    BlockPool& pool = dc.pool(small, private_pool);
    for (auto it = pool.begin(); it != pool.end();) {
      Block* block = *it;
      if (block->is_split()) {
        ++it;
        continue;
      }
      if (private_pool != nullptr && private_pool->allocator != nullptr) {
        private_pool->allocator->free(block->ptr, block->size, dc.index, native_stream(block->stream));
      } else {
        dc.segments_to_free.push_back(block->ptr);
      }
      if (C10_UNLIKELY(dc.max_entries > 0)) {
        record_trace(dc, TraceEntry::SEGMENT_FREE, block->ptr, block->size, block->stream,
                     pool_id(block), nullptr);
      }
      update_stat(dc.stats.segment, small, -1);
      update_reserved(dc, block, -static_cast<int64_t>(block->size));
      dc.stats.num_device_free += 1;
      if (private_pool != nullptr) {
        private_pool->segment_count -= 1;
      }
      it = pool.erase(it);
      delete block;
    }
  }
}

// Releases a private pool's unused segments, and the pool itself once no
// MemPool or route names it and it holds no segment.
void release_private_pool(DeviceCache& dc, c10::MempoolId_t id) {
  auto it = dc.private_pools.find(id);
  if (it == dc.private_pools.end()) {
    return;
  }
  PrivatePool* pool = it->second.get();
  release_pool_segments(dc, pool);
  const bool routed = std::any_of(dc.routes.begin(), dc.routes.end(),
                                  [&](const PoolRoute& route) { return route.id == id; });
  if (pool->use_count == 0 && pool->segment_count == 0 && !routed) {
    dc.private_pools.erase(it);
  }
}

// What emptyCache() and an out-of-memory retry release// LITERALINCLUDE START: POOL_IMPL
void EmuDeviceAllocator::createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                            std::shared_ptr<PluggableAllocatorFns> allocator,
                                            bool use_on_oom, bool no_split) {
  TORCH_CHECK(mempool_id != c10::MempoolId_t(0, 0), "emu allocator: {0, 0} is the default pool, not a private one");
  DeviceCache& dc = cache(device);
  CacheLock guard(dc);
  auto it = dc.private_pools.find(mempool_id);
  if (it == dc.private_pools.end()) {
    dc.private_pools.emplace(mempool_id,
                             std::make_unique<PrivatePool>(mempool_id, std::move(allocator), use_on_oom, no_split));
  } else {
    TORCH_CHECK(allocator == nullptr || allocator == it->second->allocator,
                "emu allocator: memory pool (", mempool_id.first, ", ", mempool_id.second,
                ") already exists with another allocator");
    it->second->use_count += 1;
  }
}

void EmuDeviceAllocator::beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                             std::function<bool(c10::Stream)> filter) {
  DeviceCache& dc = cache(device);
  {
    CacheLock guard(dc);
    for (const PoolRoute& route : dc.routes) {
      TORCH_CHECK(route.id != mempool_id, "emu allocator: already allocating to memory pool (",
                  mempool_id.first, ", ", mempool_id.second, ")");
    }
  }
  createOrIncrefPool(device, mempool_id);
  CacheLock guard(dc);
  dc.routes.push_back({mempool_id, std::move(filter)});
}

void EmuDeviceAllocator::beginAllocateCurrentThreadToPool(c10::DeviceIndex device,
                                                          c10::MempoolId_t mempool_id) {
  // Kernels launched by this thread allocate on its behalf (see EmuLaunch.h).
  beginAllocateToPool(device, mempool_id, [thread = launching_thread()](c10::Stream) {
    return launching_thread() == thread;
  });
}

void EmuDeviceAllocator::endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  DeviceCache& dc = cache(device);
  CacheLock guard(dc);
  for (auto it = dc.routes.begin(); it != dc.routes.end(); ++it) {
    if (it->id == mempool_id) {
      dc.routes.erase(it);
      return;
    }
  }
  TORCH_CHECK(false, "emu allocator: endAllocateToPool: not allocating to memory pool (",
              mempool_id.first, ", ", mempool_id.second, ")");
}

void EmuDeviceAllocator::releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  DeviceCache& dc = cache(device);
  CacheLock guard(dc);
  auto it = dc.private_pools.find(mempool_id);
  TORCH_CHECK(it != dc.private_pools.end() && it->second->use_count > 0,
              "emu allocator: releasePool: no memory pool (", mempool_id.first, ", ",
              mempool_id.second, ") in use on emu:", static_cast<int>(device));
  it->second->use_count -= 1;
}

int EmuDeviceAllocator::getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) {
  DeviceCache& dc = cache(device);
  CacheLock guard(dc);
  auto it = dc.private_pools.find(mempool_id);
  return it == dc.private_pools.end() ? 0 : it->second->use_count;
}

c10::MempoolId_t EmuDeviceAllocator::graph_pool_handle(bool is_user_created) {
  static std::atomic<c10::CaptureId_t> next_user_id{1};
  static std::atomic<c10::CaptureId_t> next_capture_id{1};
  if (is_user_created) {
    return {0, next_user_id++};
  }
  return {next_capture_id++, 0};
}
// LITERALINCLUDE END: POOL_IMPL

// LITERALINCLUDE START: MEMORY_FRACTION
void EmuDeviceAllocator::setMemoryFraction(double fraction, c10::DeviceIndex device) {
  TORCH_CHECK(fraction >= 0 && fraction <= 1, "emu allocator: invalid memory fraction ", fraction,
              ", allowed range: 0~1");
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  DeviceCache& dc = cache(device);
  EMU_CHECK(emuMemGetInfo(device, &free_bytes, &total_bytes));
  CacheLock guard(dc);
  dc.fraction = fraction;
  dc.reserve_limit = fraction >= 1 ? SIZE_MAX : static_cast<size_t>(fraction * static_cast<double>(total_bytes));
}
// LITERALINCLUDE END: MEMORY_FRACTION

double EmuDeviceAllocator::getMemoryFraction(c10::DeviceIndex device) {
  DeviceCache& dc = cache(device);
  CacheLock guard(dc);
  return dc.fraction;
}

} // namespace torch_emu
