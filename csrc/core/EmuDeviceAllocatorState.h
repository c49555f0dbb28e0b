// The caching allocator's private state, shared by the files that implement
// it: EmuDeviceAllocator.cpp (caching: allocate, free, reuse in stream order,
// out of memory), EmuDeviceAllocatorReturn.cpp (freed blocks back to their
// pools: merged, or parked for reuse), EmuDeviceAllocatorPools.cpp (private
// pools, memory fraction), EmuDeviceAllocatorLive.cpp (the block of a live allocation),
// EmuDeviceAllocatorPluggable.cpp, EmuDeviceAllocatorHistory.cpp (history,
// snapshots) and EmuDeviceAllocatorStats.cpp. Nothing else includes it.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/SmallVector.h>
#include <c10/util/flat_hash_map.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/emu_runtime.h"

namespace torch_emu {

struct PluggableAllocatorFns;

struct PrivatePool;

// A range of one segment (one emuMalloc). It is allocated (handed out), pending
// (freed, but waiting for events of streams added by recordStream) or cached
// (in its pool). Neighbours in the segment are linked so that free ranges can
// be coalesced; `stream` is the segment's allocation stream.
struct Block {
  Block(c10::Stream stream, size_t size, bool small, void* ptr, PrivatePool* pool = nullptr)
      : stream(stream), size(size), small(small), ptr(ptr), pool(pool) {}

  c10::Stream stream;
  size_t size;
  bool small; // which pool: every block of a segment is in the same one
  void* ptr;
  PrivatePool* pool; // the private pool of the segment; nullptr: default pools
  size_t requested_size = 0; // what the caller asked for (before rounding)
  bool allocated = false;
  bool parked = false; // freed, kept out of its pool for a same-size reuse (park_block)
  int event_count = 0; // events still to complete before reuse
  uint64_t freed_at = 0; // cached since this point of launch order (stream_order_now())
  // From recordStream: a few streams at most. Not a hash set, whose empty
  // state allocates (every Block, even a lookup key, would cost a malloc).
  c10::SmallVector<c10::Stream, 2> stream_uses;
  Block* prev = nullptr;
  Block* next = nullptr;
  std::shared_ptr<c10::GatheredContext> context; // where it was allocated (history on)

  bool is_split() const {
    return prev != nullptr || next != nullptr;
  }
  // In its pool: free, and neither waiting for events nor parked.
  bool is_cached() const {
    return !allocated && event_count == 0 && !parked;
  }
};

// Pools are ordered by stream, then size, then address: lower_bound of a
// (stream, size) key is the best fit on that stream.
struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream.id() != b->stream.id()) {
      return a->stream.id() < b->stream.id();
    }
    if (a->size != b->size) {
      return a->size < b->size;
    }
    return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
  }
};
using BlockPool = std::set<Block*, BlockLess>;

// LITERALINCLUDE START: PRIVATE_POOL
// A private pool (torch.emu.MemPool, a graph's pool): segments of its own, so
// that its memory is neither used by nor released to other allocations.
struct PrivatePool {
  PrivatePool(c10::MempoolId_t id, std::shared_ptr<PluggableAllocatorFns> allocator,
              bool use_on_oom, bool no_split)
      : id(id), allocator(std::move(allocator)), use_on_oom(use_on_oom), no_split(no_split) {}

  const c10::MempoolId_t id;
  const std::shared_ptr<PluggableAllocatorFns> allocator; // nullptr: emuMalloc/emuFree
  const bool use_on_oom; // other allocations may take its cached blocks when out of memory
  const bool no_split;   // one segment per allocation, never split
  int use_count = 1;     // MemPool objects and routes that name it
  int segment_count = 0; // segments it holds; it is deleted once unused and 0
  BlockPool small_blocks;
  BlockPool large_blocks;
};

// Where allocations go while a pool is routed (beginAllocateToPool).
struct PoolRoute {
  c10::MempoolId_t id;
  std::function<bool(c10::Stream)> filter;
};
// LITERALINCLUDE END: PRIVATE_POOL

struct DeviceCache {
  explicit DeviceCache(c10::DeviceIndex index) : index(index) {
    // We split blocks of any size (no max_split_size_mb); -1 is what CUDA
    // reports when that limit is unset.
    stats.max_split_size = -1;
  }

  BlockPool& pool(bool small, PrivatePool* private_pool = nullptr) {
    if (private_pool != nullptr) {
      return small ? private_pool->small_blocks : private_pool->large_blocks;
    }
    return small ? small_blocks : large_blocks;
  }

  const c10::DeviceIndex index;
  std::mutex mutex; // guards everything below and the Blocks of this device
  c10::CachingDeviceAllocator::DeviceStats stats;
  BlockPool small_blocks;
  BlockPool large_blocks;
  std::vector<std::pair<emuEvent_t, Block*>> pending_events;
  std::vector<emuEvent_t> spare_events; // completed events, ready for reuse
  ska::flat_hash_map<c10::MempoolId_t, std::unique_ptr<PrivatePool>, c10::MempoolIdHash> private_pools;
  std::vector<PoolRoute> routes; // active beginAllocateToPool calls, oldest first
  double fraction = 1.0;         // set_per_process_memory_fraction
  size_t reserve_limit = SIZE_MAX; // fraction * capacity; SIZE_MAX: no cap
  size_t max_entries = 0;          // history size; 0: not recording
  size_t trace_next = 0;           // oldest entry once the ring is full
  uint32_t skip_actions = 0;       // bit (1 << action): not recorded
  std::vector<c10::CachingDeviceAllocator::TraceEntry> trace;
  // Segments given up while `mutex` is held, handed to emuFree once it is not
  // (CacheLock): emuFree waits for the device's queued kernels, which may
  // need this mutex to allocate their scratch space.
  std::vector<void*> segments_to_free;
  // The runtime's message when emuMalloc last refused, for raise_oom.
  std::string runtime_refusal;
  // A Block object kept for the next split (new_block, drop_block).
  Block* spare_block = nullptr;
  // Freed blocks parked for a same-size reuse (park_block), newest last.
  static constexpr int kParkedSlots = 4;
  Block* parked[kParkedSlots] = {};
  int parked_count = 0;
  // The live allocations of this device, by data pointer. Under this mutex,
  // not one of their own: an allocation and a free then take one lock each.
  ska::flat_hash_map<void*, Block*> allocated;
};

void merge_parked(DeviceCache& dc);

// dc.mutex, held for a scope; segments given up inside it are freed after.
// Taken this way, it first merges the parked blocks into their pools, so that
// whatever reads the pools or the statistics sees them as eager merging
// leaves them; adopted (the allocation and free paths), it does not.
class CacheLock {
 public:
  explicit CacheLock(DeviceCache& dc) : dc_(dc), lock_(dc.mutex) {
    if (dc.parked_count > 0) {
      merge_parked(dc);
    }
  }
  CacheLock(DeviceCache& dc, std::adopt_lock_t) : dc_(dc), lock_(dc.mutex, std::adopt_lock) {}
  ~CacheLock();
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  DeviceCache& dc_;
  std::unique_lock<std::mutex> lock_;
};

inline c10::MempoolId_t pool_id(const Block* block) {
  return block->pool != nullptr ? block->pool->id : c10::MempoolId_t{0, 0};
}

// Whether a request of `size` bytes is served from the small pool.
bool small_request(size_t size);

// Under dc.mutex (a CacheLock), every one.
// EmuDeviceAllocatorReturn.cpp: a Block for a split (reusing the one a merge
// gave up), a block into a pool (in a node extracted from one, if any), a
// freed block back to its pool, parked (false: not parkable) or taken back.
Block* new_block(DeviceCache& dc, c10::Stream stream, size_t size, bool small, void* ptr, PrivatePool* pool);
void insert_block(BlockPool& pool, Block* block, BlockPool::node_type& node);
void return_to_pool(DeviceCache& dc, Block* block);
bool park_block(DeviceCache& dc, Block* block);
Block* take_parked(DeviceCache& dc, const c10::Stream& stream, size_t size);
[[noreturn]] void raise_oom(DeviceCache& dc, size_t size, const c10::Stream& stream);
void process_events(DeviceCache& dc);
void release_pool_segments(DeviceCache& dc, PrivatePool* private_pool);
void release_private_pool(DeviceCache& dc, c10::MempoolId_t id);
void record_trace(DeviceCache& dc, c10::CachingDeviceAllocator::TraceEntry::Action action, const void* addr,
                  size_t size, const c10::Stream& stream, c10::MempoolId_t pool,
                  std::shared_ptr<c10::GatheredContext> context);
// Every statistic counts in the aggregate and in the pool of the block.
// Inline: an allocation and its free update about ten of them.
inline void update_stat(c10::CachingAllocator::StatArray& stat, bool small, int64_t delta) {
  using c10::CachingAllocator::StatType;
  for (StatType type : {StatType::AGGREGATE, small ? StatType::SMALL_POOL : StatType::LARGE_POOL}) {
    auto& s = stat[static_cast<size_t>(type)];
    if (delta >= 0) {
      s.increase(static_cast<size_t>(delta));
    } else {
      s.decrease(static_cast<size_t>(-delta));
    }
  }
}
void update_reserved(DeviceCache& dc, const Block* segment, int64_t delta);
void report_to_profiler(DeviceCache& dc, void* ptr, int64_t delta);

} // namespace torch_emu
