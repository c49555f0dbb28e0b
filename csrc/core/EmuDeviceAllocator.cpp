#include "core/EmuDeviceAllocator.h"

#include <c10/util/Exception.h>

#include <c10/util/ApproximateClock.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "core/EmuException.h"
#include "core/EmuKernelContext.h"
#include "core/EmuStream.h"
#include "runtime/emu_runtime.h"

namespace torch_emu {

using c10::CachingAllocator::format_size;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::TraceEntry;

namespace {

// LITERALINCLUDE START: DEVICE_ALLOCATOR_SIZES
// The same sizes as torch.cuda's caching allocator, so memory stats compare.
constexpr size_t kMinBlockSize = 512;       // requests are rounded up to this
constexpr size_t kSmallSize = 1 << 20;      // largest request of the small pool
constexpr size_t kSmallBuffer = 2 << 20;    // segment size of the small pool
constexpr size_t kMinLargeAlloc = 10 << 20; // large requests below this...
constexpr size_t kLargeBuffer = 20 << 20;   // ...share a segment of this size
constexpr size_t kRoundLarge = 2 << 20;     // bigger segments round up to this

size_t round_size(size_t nbytes) {
  return (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

// How much to ask the runtime for when no cached block fits `size`: a bit more
// than needed, so that later requests can be served by splitting.
size_t segment_size(size_t size) {
  if (size <= kSmallSize) {
    return kSmallBuffer;
  }
  if (size < kMinLargeAlloc) {
    return kLargeBuffer;
  }
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_SIZES

// Every statistic counts in the aggregate and in the pool of the block.
void update_stat(StatArray& stat, bool small, int64_t delta) {
  for (StatType type : {StatType::AGGREGATE, small ? StatType::SMALL_POOL : StatType::LARGE_POOL}) {
    auto& s = stat[static_cast<size_t>(type)];
    if (delta >= 0) {
      s.increase(static_cast<size_t>(delta));
    } else {
      s.decrease(static_cast<size_t>(-delta));
    }
  }
}

} // namespace

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
  int event_count = 0; // events still to complete before reuse
  uint64_t freed_at = 0; // cached since this point of launch order (stream_order_now())
  ska::flat_hash_set<c10::Stream> stream_uses; // from recordStream
  Block* prev = nullptr;
  Block* next = nullptr;
  std::shared_ptr<c10::GatheredContext> context; // where it was allocated (history on)

  bool is_split() const {
    return prev != nullptr || next != nullptr;
  }
  bool is_cached() const {
    return !allocated && event_count == 0;
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
  std::vector<TraceEntry> trace;
  // Segments given up while `mutex` is held, handed to emuFree once it is not
  // (CacheLock): emuFree waits for the device's queued kernels, which may
  // need this mutex to allocate their scratch space.
  std::vector<void*> segments_to_free;
  // The runtime's message when emuMalloc last refused, for raise_oom.
  std::string runtime_refusal;
};

namespace {

// Frees the segments `dc` gave up so far, with dc.mutex released meanwhile
// (held by `lock`, which it leaves unlocked).
void free_given_up_segments(DeviceCache& dc, std::unique_lock<std::mutex>& lock) {
  const std::vector<void*> segments = std::exchange(dc.segments_to_free, {});
  lock.unlock();
  for (void* ptr : segments) {
    const emuError_t err = emuFree(ptr); // emuFree finds the device from the pointer
    if (err != emuSuccess) {
      TORCH_WARN("emu allocator: freeing a cached segment failed: ", emuGetLastErrorMessage());
    }
  }
}

// dc.mutex, held for a scope; segments given up inside it are freed after.
class CacheLock {
 public:
  explicit CacheLock(DeviceCache& dc) : dc_(dc), lock_(dc.mutex) {}
  ~CacheLock() {
    free_given_up_segments(dc_, lock_);
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  DeviceCache& dc_;
  std::unique_lock<std::mutex> lock_;
};

// For a retry that needs the memory back now: frees the segments given up so
// far with dc.mutex (held by a CacheLock up the stack) released meanwhile.
void free_segments_now(DeviceCache& dc) {
  std::unique_lock<std::mutex> lock(dc.mutex, std::adopt_lock);
  free_given_up_segments(dc, lock);
  lock.lock();
  lock.release(); // the CacheLock up the stack owns it again
}

// LITERALINCLUDE START: DEVICE_ALLOCATOR_TRACE
// One entry of the allocation history, when it is on: a ring of the last
// max_entries events of the device, in CUDA's TraceEntry form.
void record_trace(DeviceCache& dc, TraceEntry::Action action, const void* addr, size_t size,
                  const c10::Stream& stream, c10::MempoolId_t pool,
                  std::shared_ptr<c10::GatheredContext> context) {
  if (dc.skip_actions & (1u << action)) {
    return;
  }
  TraceEntry entry(action, dc.index, reinterpret_cast<size_t>(addr), size, reported_stream(stream), pool,
                   c10::getTime(), std::move(context));
  if (dc.trace.size() < dc.max_entries) {
    dc.trace.push_back(std::move(entry));
  } else {
    dc.trace[dc.trace_next] = std::move(entry);
    dc.trace_next = (dc.trace_next + 1) % dc.max_entries;
  }
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_TRACE

c10::MempoolId_t pool_id(const Block* block) {
  return block->pool != nullptr ? block->pool->id : c10::MempoolId_t{0, 0};
}

// Reserved bytes also count per private pool (reserved_bytes_by_private_pools).
void update_reserved(DeviceCache& dc, const Block* segment, int64_t delta) {
  update_stat(dc.stats.reserved_bytes, segment->small, delta);
  if (segment->pool != nullptr) {
    update_stat(dc.stats.reserved_bytes_by_private_pools[segment->pool->id], segment->small, delta);
  }
}

// LITERALINCLUDE START: DEVICE_ALLOCATOR_FREE
// A block nobody uses any more goes back to its pool, merged with free
// neighbours so that the segment can become whole again (and be released).
void return_to_pool(DeviceCache& dc, Block* block) {
  const size_t size = block->size;
  const size_t requested = block->requested_size;
  if (C10_UNLIKELY(dc.max_entries > 0)) {
    record_trace(dc, TraceEntry::FREE_COMPLETED, block->ptr, size, block->stream, pool_id(block), nullptr);
  }
  BlockPool& pool = dc.pool(block->small, block->pool);
  block->freed_at = stream_order_now();
  // inactive_split counts cached blocks that are only part of a segment.
  int64_t split_blocks = 0;
  int64_t split_bytes = 0;
  for (Block* neighbour : {block->prev, block->next}) {
    if (neighbour == nullptr || !neighbour->is_cached()) {
      continue;
    }
    pool.erase(neighbour);
    if (neighbour == block->prev) {
      block->ptr = neighbour->ptr;
      block->prev = neighbour->prev;
      if (block->prev != nullptr) {
        block->prev->next = block;
      }
    } else {
      block->next = neighbour->next;
      if (block->next != nullptr) {
        block->next->prev = block;
      }
    }
    block->size += neighbour->size;
    block->freed_at = std::max(block->freed_at, neighbour->freed_at);
    split_blocks -= 1;
    split_bytes -= static_cast<int64_t>(neighbour->size);
    delete neighbour;
  }
  if (block->is_split()) {
    split_blocks += 1;
    split_bytes += static_cast<int64_t>(block->size);
  }
  block->requested_size = 0;
  block->context.reset();
  pool.insert(block);

  auto& stats = dc.stats;
  update_stat(stats.inactive_split, block->small, split_blocks);
  update_stat(stats.inactive_split_bytes, block->small, split_bytes);
  update_stat(stats.active, block->small, -1);
  update_stat(stats.active_bytes, block->small, -static_cast<int64_t>(size));
  update_stat(stats.requested_bytes, block->small, -static_cast<int64_t>(requested));
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_FREE

// LITERALINCLUDE START: DEVICE_ALLOCATOR_RECORD_STREAM
// A freed block that other streams used (recordStream) may still be read or
// written by work queued on them. Record an event on each; the block stays out
// of the pool until all of them completed.
void record_events(DeviceCache& dc, Block* block) {
  for (const c10::Stream& stream : block->stream_uses) {
    emuEvent_t event = nullptr;
    if (dc.spare_events.empty()) {
      EMU_CHECK(emuEventCreateWithFlags(&event, emuEventDisableTiming));
    } else {
      event = dc.spare_events.back();
      dc.spare_events.pop_back();
    }
    EMU_CHECK(emuEventRecord(event, native_stream(stream)));
    block->event_count += 1;
    dc.pending_events.emplace_back(event, block);
  }
  block->stream_uses.clear();
}

// Polled (never waited for) at every allocation, free and emptyCache.
void process_events(DeviceCache& dc) {
  auto& pending = dc.pending_events;
  for (size_t i = 0; i < pending.size();) {
    auto [event, block] = pending[i];
    const emuError_t status = emuEventQuery(event);
    if (status == emuErrorNotReady) {
      ++i;
      continue;
    }
    EMU_CHECK(status);
    pending[i] = pending.back();
    pending.pop_back();
    dc.spare_events.push_back(event);
    if (--block->event_count == 0) {
      return_to_pool(dc, block);
    }
  }
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_RECORD_STREAM

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

// What emptyCache() and an out-of-memory retry release: the default pools and
// the pools nobody uses any more.
void release_cached_segments(DeviceCache& dc) {
  process_events(dc);
  release_pool_segments(dc, nullptr);
  std::vector<c10::MempoolId_t> unused;
  for (const auto& [id, pool] : dc.private_pools) {
    if (pool->use_count == 0) {
      unused.push_back(id);
    }
  }
  for (const auto& id : unused) {
    release_private_pool(dc, id);
  }
}

// LITERALINCLUDE START: DEVICE_ALLOCATOR_OOM
// Raises torch.OutOfMemoryError with the numbers a user needs to understand
// it. Nothing but num_ooms (and the history) records a failed request.
[[noreturn]] void raise_oom(DeviceCache& dc, size_t size, const c10::Stream& stream) {
  dc.stats.num_ooms += 1;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  EMU_CHECK(emuMemGetInfo(dc.index, &free_bytes, &total_bytes));
  if (C10_UNLIKELY(dc.max_entries > 0)) {
    // As in CUDA's history, an OOM entry's address is the device's free bytes.
    record_trace(dc, TraceEntry::OOM, reinterpret_cast<void*>(free_bytes), size, stream, {0, 0}, nullptr);
  }
  constexpr auto agg = static_cast<size_t>(StatType::AGGREGATE);
  const auto allocated = static_cast<uint64_t>(dc.stats.allocated_bytes[agg].current);
  const auto reserved = static_cast<uint64_t>(dc.stats.reserved_bytes[agg].current);
  std::string cap;
  if (dc.reserve_limit != SIZE_MAX) {
    cap = c10::str(" This process may reserve at most ", format_size(dc.reserve_limit),
                   " of it (set_per_process_memory_fraction(", dc.fraction, ")).");
  }
  // What the runtime said when it refused (an injected fault says so).
  const std::string refusal = std::exchange(dc.runtime_refusal, {});
  TORCH_CHECK_WITH(OutOfMemoryError, false,
      "emu out of memory. Tried to allocate ", format_size(size), ". emu:",
      static_cast<int>(dc.index), " has a total capacity of ", format_size(total_bytes),
      " of which ", format_size(free_bytes), " is free.", cap, " Of the allocated memory ",
      format_size(allocated), " is allocated by PyTorch, and ",
      format_size(reserved - allocated), " is reserved by PyTorch but unallocated.",
      refusal.empty() ? "" : " The runtime said: ", refusal);
}

// Gets `bytes` of new memory for a segment, from the pool's pluggable
// allocator or from the runtime; nullptr when the device is full or the
// memory fraction would be exceeded.
void* try_device_malloc(DeviceCache& dc, size_t bytes, const c10::Stream& stream, PrivatePool* pool) {
  constexpr auto agg = static_cast<size_t>(StatType::AGGREGATE);
  const auto reserved = static_cast<size_t>(dc.stats.reserved_bytes[agg].current);
  if (dc.reserve_limit != SIZE_MAX && reserved + bytes > dc.reserve_limit) {
    return nullptr;
  }
  void* ptr = nullptr;
  if (pool != nullptr && pool->allocator != nullptr) {
    ptr = pool->allocator->alloc(bytes, dc.index, native_stream(stream));
    TORCH_CHECK(ptr == nullptr || is_device_ptr(ptr),
                "emu allocator: the pluggable allocator of a memory pool returned ", ptr,
                ", which is not emu device memory (allocate it with emuMalloc)");
    return ptr;
  }
  const emuError_t err = emuMalloc(&ptr, bytes);
  if (err == emuErrorMemoryAllocation) {
    dc.runtime_refusal = emuGetLastErrorMessage();
    return nullptr;
  }
  EMU_CHECK(err);
  return ptr;
}

// Gets a new segment. If the device is full (or the fraction reached), release
// what the cache holds and retry once; nullptr if that fails too.
Block* new_segment(DeviceCache& dc, const c10::Stream& stream, size_t size, bool small,
                   PrivatePool* pool, const std::shared_ptr<c10::GatheredContext>& context) {
  const size_t bytes = pool != nullptr && pool->no_split ? size : segment_size(size);
  dc.runtime_refusal.clear();
  void* ptr = try_device_malloc(dc, bytes, stream, pool);
  if (ptr == nullptr) {
    release_cached_segments(dc);
    free_segments_now(dc);
    dc.stats.num_alloc_retries += 1;
    ptr = try_device_malloc(dc, bytes, stream, pool);
  }
  if (ptr == nullptr) {
    return nullptr;
  }
  auto* block = new Block(stream, bytes, small, ptr, pool);
  if (C10_UNLIKELY(dc.max_entries > 0)) {
    record_trace(dc, TraceEntry::SEGMENT_ALLOC, ptr, bytes, stream, pool_id(block), context);
  }
  update_stat(dc.stats.segment, small, 1);
  update_reserved(dc, block, static_cast<int64_t>(bytes));
  dc.stats.num_device_alloc += 1;
  if (pool != nullptr) {
    pool->segment_count += 1;
  }
  return block;
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_OOM

// LITERALINCLUDE START: DEVICE_ALLOCATOR_ROUTE
// The private pool allocations on `stream` go to, or nullptr for the default
// pools. One branch when no pool is routed.
PrivatePool* routed_pool(DeviceCache& dc, const c10::Stream& stream) {
  if (C10_LIKELY(dc.routes.empty())) {
    return nullptr;
  }
  for (auto it = dc.routes.rbegin(); it != dc.routes.rend(); ++it) {
    if (it->filter(stream)) {
      return dc.private_pools.at(it->id).get();
    }
  }
  return nullptr;
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_ROUTE

// The best fit for `size` on `stream` among the cached blocks of `pool`.
// LITERALINCLUDE START: DEVICE_ALLOCATOR_QUEUED_REUSE
// A kernel that runs after its launch returned (queue_kernel) allocates its
// scratch space when it runs, which in stream order is where it was launched:
// a block freed since then may still be needed by kernels queued between the
// two, so it only takes blocks freed before its launch.
Block* take_cached(BlockPool& pool, const c10::Stream& stream, size_t size, bool small) {
  Block key(stream, size, small, nullptr);
  const uint64_t launched_at = queued_kernel_launch_order();
  for (auto it = pool.lower_bound(&key); it != pool.end() && (*it)->stream == stream; ++it) {
    Block* block = *it;
    if (launched_at == 0 || block->freed_at < launched_at) {
      pool.erase(it);
      return block;
    }
  }
  return nullptr;
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_QUEUED_REUSE

// Out of memory: pools created with use_on_oom lend their cached blocks.
Block* take_from_oom_pools(DeviceCache& dc, const c10::Stream& stream, size_t size, bool small) {
  for (auto& [id, pool] : dc.private_pools) {
    if (pool->use_on_oom) {
      if (Block* block = take_cached(dc.pool(small, pool.get()), stream, size, small)) {
        return block;
      }
    }
  }
  return nullptr;
}

constexpr auto kAggregate = static_cast<size_t>(StatType::AGGREGATE);

// torch.profiler(profile_memory=True) sees every allocation and free.
void report_to_profiler(DeviceCache& dc, void* ptr, int64_t delta) {
  c10::reportMemoryUsageToProfiler(
      ptr, delta, static_cast<size_t>(dc.stats.allocated_bytes[kAggregate].current),
      static_cast<size_t>(dc.stats.reserved_bytes[kAggregate].current),
      c10::Device(c10::DeviceType::PrivateUse1, dc.index));
}

// LITERALINCLUDE START: DEVICE_ALLOCATOR_MALLOC
// Serves `nbytes` on `stream`: best fit among the cached blocks of that stream
// in the routed pool (only they are safe to reuse without synchronisation),
// else a new segment; the block is split when what remains is worth keeping.
// Out of memory: raises if `raise_oom_error`, else returns nullptr.
Block* malloc_block(DeviceCache& dc, size_t nbytes, c10::Stream stream,
                    const std::shared_ptr<c10::GatheredContext>& context, bool raise_oom_error) {
  CacheLock guard(dc);
  process_events(dc);
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  PrivatePool* private_pool = routed_pool(dc, stream);
  BlockPool& pool = dc.pool(small, private_pool);

  Block* block = take_cached(pool, stream, size, small);
  if (block == nullptr) {
    block = new_segment(dc, stream, size, small, private_pool, context);
  }
  if (block == nullptr && private_pool == nullptr) {
    block = take_from_oom_pools(dc, stream, size, small);
  }
  if (block == nullptr) {
    if (!raise_oom_error) {
      return nullptr;
    }
    raise_oom(dc, size, stream);
  }

  auto& stats = dc.stats;
  const bool was_split = block->is_split();
  const size_t remaining = block->size - size;
  const bool no_split = block->pool != nullptr && block->pool->no_split;
  if (!no_split && (small ? remaining >= kMinBlockSize : remaining > kSmallSize)) {
    auto* rest = new Block(stream, remaining, small, static_cast<char*>(block->ptr) + size, block->pool);
    rest->freed_at = block->freed_at; // still cached since then
    rest->prev = block;
    rest->next = block->next;
    if (rest->next != nullptr) {
      rest->next->prev = rest;
    }
    block->next = rest;
    block->size = size;
    dc.pool(small, block->pool).insert(rest);
    if (was_split) {
      // A cached split block shrank by what we hand out.
      update_stat(stats.inactive_split_bytes, small, -static_cast<int64_t>(size));
    } else {
      // A whole segment became split: its rest is a new inactive split block.
      update_stat(stats.inactive_split, small, 1);
      update_stat(stats.inactive_split_bytes, small, static_cast<int64_t>(remaining));
    }
  } else if (was_split) {
    update_stat(stats.inactive_split, small, -1);
    update_stat(stats.inactive_split_bytes, small, -static_cast<int64_t>(block->size));
  }

  block->allocated = true;
  block->requested_size = nbytes;
  update_stat(stats.allocation, small, 1);
  update_stat(stats.allocated_bytes, small, static_cast<int64_t>(block->size));
  update_stat(stats.active, small, 1);
  update_stat(stats.active_bytes, small, static_cast<int64_t>(block->size));
  update_stat(stats.requested_bytes, small, static_cast<int64_t>(nbytes));
  if (C10_UNLIKELY(dc.max_entries > 0)) {
    record_trace(dc, TraceEntry::ALLOC, block->ptr, nbytes, stream, pool_id(block), context);
  }
  block->context = std::move(context);
  report_to_profiler(dc, block->ptr, static_cast<int64_t>(block->size));
  return block;
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_MALLOC

std::atomic<size_t (*)()> g_release_before_oom{nullptr};

} // namespace

void set_release_before_oom(size_t (*release)()) {
  g_release_before_oom.store(release, std::memory_order_release);
}

DeviceCache& EmuDeviceAllocator::cache(c10::DeviceIndex device) {
  std::call_once(caches_once_, [this] {
    // Never deleted: tensors may be freed during interpreter shutdown.
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      caches_.push_back(new DeviceCache(i));
    }
  });
  check_device_index(device);
  TORCH_INTERNAL_ASSERT(static_cast<size_t>(device) < caches_.size());
  return *caches_[device];
}

c10::DataPtr EmuDeviceAllocator::allocate(size_t nbytes) {
  const c10::DeviceIndex device = current_device();
  const c10::Device where(c10::DeviceType::PrivateUse1, device);
  if (nbytes == 0) {
    return {nullptr, nullptr, &deleter, where};
  }
  if (C10_UNLIKELY(pluggable_ != nullptr)) {
    return allocate_pluggable(nbytes, device);
  }
  allocated_once_.store(true, std::memory_order_relaxed);
  std::shared_ptr<c10::GatheredContext> context;
  if (C10_UNLIKELY(recording_.load(std::memory_order_relaxed))) {
    context = gather_context(/*on_free=*/false); // outside the lock: it may take the GIL
  }
  const c10::Stream stream = current_stream(device);
  Block* block = malloc_block(cache(device), nbytes, stream, context, /*raise_oom_error=*/false);
  if (block == nullptr) {
    // As CUDA does before giving up: free what was kept only for other
    // processes that have since let go (IPC), outside the cache's lock since
    // it frees through this allocator.
    size_t (*release)() = g_release_before_oom.load(std::memory_order_acquire);
    if (release != nullptr && release() > 0) {
      block = malloc_block(cache(device), nbytes, stream, context, /*raise_oom_error=*/true);
    } else {
      std::lock_guard<std::mutex> guard(cache(device).mutex);
      raise_oom(cache(device), round_size(nbytes), stream);
    }
  }
  {
    std::lock_guard<std::mutex> guard(blocks_mutex_);
    allocated_blocks_.emplace(block->ptr, block);
  }
  // The context is the data pointer itself, so raw_deleter() is valid.
  return {block->ptr, block->ptr, &deleter, where};
}

void EmuDeviceAllocator::deleter(void* ptr) {
  // Runs in destructors: an exception here would terminate the process.
  try {
    device_allocator()->free(ptr);
  } catch (const std::exception& e) {
    TORCH_WARN("emu allocator: could not free ", ptr, ": ", e.what());
  }
}

c10::DeleterFnPtr EmuDeviceAllocator::raw_deleter() const {
  return &deleter;
}

void EmuDeviceAllocator::free(void* ptr) {
  if (ptr == nullptr) {
    return;
  }
  if (C10_UNLIKELY(pluggable_ != nullptr)) {
    free_pluggable(ptr);
    return;
  }
  std::shared_ptr<c10::GatheredContext> context;
  if (C10_UNLIKELY(recording_.load(std::memory_order_relaxed))) {
    context = gather_context(/*on_free=*/true);
  }
  Block* block = take_allocated_block(ptr);
  DeviceCache& dc = cache(block->stream.device_index());
  CacheLock guard(dc);
  block->allocated = false;
  update_stat(dc.stats.allocation, block->small, -1);
  update_stat(dc.stats.allocated_bytes, block->small, -static_cast<int64_t>(block->size));
  report_to_profiler(dc, block->ptr, -static_cast<int64_t>(block->size));
  if (C10_UNLIKELY(dc.max_entries > 0)) {
    record_trace(dc, TraceEntry::FREE_REQUESTED, block->ptr, block->requested_size, block->stream,
                 pool_id(block), std::move(context));
  }
  if (block->stream_uses.empty()) {
    return_to_pool(dc, block);
  } else {
    record_events(dc, block);
  }
  process_events(dc);
  if (C10_UNLIKELY(!caching_enabled_.load(std::memory_order_relaxed))) {
    release_cached_segments(dc);
  }
}

void EmuDeviceAllocator::raw_delete(void* ptr) {
  TORCH_CHECK(ptr == nullptr || find_block(ptr) != nullptr,
              "emu allocator: invalid device pointer ", ptr, ": not allocated by torch.emu's allocator");
  free(ptr);
}

void EmuDeviceAllocator::setCachingEnabled(bool enabled) {
  caching_enabled_.store(enabled);
  if (!enabled) {
    emptyCache();
  }
}

void EmuDeviceAllocator::copy_data(void* dest, const void* src, size_t count) const {
  EMU_CHECK(emuMemcpy(dest, src, count, emuMemcpyDeviceToDevice));
}

bool EmuDeviceAllocator::initialized() {
  return true; // usable as soon as it is registered; devices start lazily
}

void EmuDeviceAllocator::emptyCache(c10::MempoolId_t mempool_id) {
  const bool all = mempool_id == c10::MempoolId_t(0, 0);
  for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
    DeviceCache& dc = cache(i);
    CacheLock guard(dc);
    if (all) {
      release_cached_segments(dc);
    } else {
      process_events(dc);
      release_private_pool(dc, mempool_id);
    }
  }
}

// LITERALINCLUDE START: POOL_IMPL
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
  auto* block = new Block(stream, nbytes, nbytes <= kSmallSize, ptr);
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
  }
  {
    std::lock_guard<std::mutex> guard(blocks_mutex_);
    allocated_blocks_.emplace(ptr, block);
  }
  return {ptr, ptr, &deleter, c10::Device(c10::DeviceType::PrivateUse1, device)};
}

// The block behind a live allocation, no longer registered as live.
Block* EmuDeviceAllocator::take_allocated_block(void* ptr) {
  std::lock_guard<std::mutex> guard(blocks_mutex_);
  auto it = allocated_blocks_.find(ptr);
  TORCH_CHECK(it != allocated_blocks_.end(), "emu allocator: invalid device pointer ", ptr);
  Block* block = it->second;
  allocated_blocks_.erase(it);
  return block;
}

void EmuDeviceAllocator::free_pluggable(void* ptr) {
  Block* block = take_allocated_block(ptr);
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

// LITERALINCLUDE START: HISTORY
void EmuDeviceAllocator::recordHistory(bool enabled, c10::CachingDeviceAllocator::CreateContextFn gather,
                                       size_t max_entries,
                                       c10::CachingDeviceAllocator::RecordContext when,
                                       bool clear_history, uint32_t skip_actions) {
  using c10::CachingDeviceAllocator::RecordContext;
  TORCH_CHECK(!enabled || when == RecordContext::NEVER || gather != nullptr,
              "emu allocator: recording stacks needs a context function");
  gather_.store(enabled ? gather : nullptr);
  record_when_.store(static_cast<int>(enabled ? when : RecordContext::NEVER));
  for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
    DeviceCache& dc = cache(i);
    CacheLock guard(dc);
    // Oldest first, then keep the latest entries that fit the new size.
    std::rotate(dc.trace.begin(), dc.trace.begin() + static_cast<std::ptrdiff_t>(dc.trace_next), dc.trace.end());
    dc.trace_next = 0;
    if (!enabled || clear_history) {
      dc.trace.clear();
    }
    dc.max_entries = enabled ? max_entries : 0; // 0: block contexts only ("state")
    if (dc.trace.size() > dc.max_entries) {
      dc.trace.erase(dc.trace.begin(), dc.trace.end() - static_cast<std::ptrdiff_t>(dc.max_entries));
    }
    dc.skip_actions = skip_actions;
  }
  recording_.store(enabled && when != RecordContext::NEVER);
}

// The context of an allocation (STATE and up) or of a free (ALL only).
std::shared_ptr<c10::GatheredContext> EmuDeviceAllocator::gather_context(bool on_free) {
  using c10::CachingDeviceAllocator::RecordContext;
  const auto when = static_cast<RecordContext>(record_when_.load());
  auto gather = gather_.load();
  if (gather == nullptr || (on_free ? when != RecordContext::ALL : when < RecordContext::STATE)) {
    return nullptr;
  }
  return gather();
}
// LITERALINCLUDE END: HISTORY

// LITERALINCLUDE START: SNAPSHOT
// Every segment (allocated, pending and cached blocks, walked from each
// segment's first block) and the history, as CUDA's snapshot has them.
AllocatorSnapshot EmuDeviceAllocator::snapshot(c10::MempoolId_t mempool_id, bool include_traces) {
  using c10::CachingDeviceAllocator::BlockInfo;
  using c10::CachingDeviceAllocator::SegmentInfo;
  AllocatorSnapshot out;
  for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
    DeviceCache& dc = cache(i);
    CacheLock guard(dc);
    std::vector<Block*> blocks(dc.small_blocks.begin(), dc.small_blocks.end());
    blocks.insert(blocks.end(), dc.large_blocks.begin(), dc.large_blocks.end());
    for (const auto& [id, pool] : dc.private_pools) {
      blocks.insert(blocks.end(), pool->small_blocks.begin(), pool->small_blocks.end());
      blocks.insert(blocks.end(), pool->large_blocks.begin(), pool->large_blocks.end());
    }
    for (const auto& [event, block] : dc.pending_events) {
      blocks.push_back(block); // may repeat: only segment heads are used below
    }
    {
      std::lock_guard<std::mutex> blocks_guard(blocks_mutex_);
      for (const auto& [ptr, block] : allocated_blocks_) {
        if (block->stream.device_index() == i) {
          blocks.push_back(block);
        }
      }
    }
    std::set<Block*> heads;
    for (Block* block : blocks) {
      if (block->prev == nullptr && (mempool_id == c10::MempoolId_t(0, 0) || pool_id(block) == mempool_id)) {
        heads.insert(block);
      }
    }
    for (Block* head : heads) {
      SegmentInfo& segment = out.segments.emplace_back();
      segment.device = i;
      segment.address = reinterpret_cast<size_t>(head->ptr);
      segment.stream = reported_stream(head->stream);
      segment.is_large = !head->small;
      segment.owner_private_pool_id = pool_id(head);
      for (const Block* b = head; b != nullptr; b = b->next) {
        BlockInfo& info = segment.blocks.emplace_back();
        info.size = b->size;
        info.requested_size = b->requested_size;
        info.allocated = b->allocated;
        info.active = b->allocated || b->event_count > 0;
        info.context_when_allocated = b->context;
        segment.total_size += b->size;
        segment.requested_size += b->requested_size;
        segment.allocated_size += b->allocated ? b->size : 0;
        segment.active_size += info.active ? b->size : 0;
      }
    }
    auto& trace = out.device_traces.emplace_back();
    if (include_traces) {
      // Oldest first: the ring's tail, then its head.
      trace.insert(trace.end(), dc.trace.begin() + static_cast<std::ptrdiff_t>(dc.trace_next), dc.trace.end());
      trace.insert(trace.end(), dc.trace.begin(), dc.trace.begin() + static_cast<std::ptrdiff_t>(dc.trace_next));
    }
  }
  return out;
}
// LITERALINCLUDE END: SNAPSHOT

// LITERALINCLUDE START: DEVICE_ALLOCATOR_RECORD_STREAM_API
// tensor.record_stream(s): the memory is used on `s` too, so on free it must
// not be reused before the work queued on `s` by then has completed.
void EmuDeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr || ptr.get_deleter() != &deleter || pluggable_ != nullptr) {
    return; // empty, not our memory, or not cached (pluggable)
  }
  Block* block = find_block(ptr.get());
  if (block == nullptr) {
    return;
  }
  DeviceCache& dc = cache(block->stream.device_index());
  CacheLock guard(dc);
  if (stream != block->stream) {
    block->stream_uses.insert(stream);
  }
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_RECORD_STREAM_API

Block* EmuDeviceAllocator::find_block(const void* ptr) {
  std::lock_guard<std::mutex> guard(blocks_mutex_);
  auto it = allocated_blocks_.find(const_cast<void*>(ptr));
  return it == allocated_blocks_.end() ? nullptr : it->second;
}

std::optional<c10::Stream> EmuDeviceAllocator::allocation_stream(const void* ptr) {
  if (ptr == nullptr) {
    return std::nullopt;
  }
  // A block's stream never changes while it is allocated.
  const Block* block = find_block(ptr);
  return block != nullptr ? std::optional<c10::Stream>(block->stream) : std::nullopt;
}

c10::CachingDeviceAllocator::DeviceStats EmuDeviceAllocator::getDeviceStats(
    c10::DeviceIndex device) {
  DeviceCache& dc = cache(device);
  CacheLock guard(dc);
  return dc.stats;
}

namespace {
// Every StatArray of DeviceStats, for the two reset operations.
template <typename Fn>
void for_each_stat(c10::CachingDeviceAllocator::DeviceStats& s, Fn&& fn) {
  for (StatArray* array : {&s.allocation, &s.segment, &s.active, &s.inactive_split,
                           &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                           &s.inactive_split_bytes, &s.requested_bytes}) {
    for (auto& stat : *array) {
      fn(stat);
    }
  }
  for (auto& [id, array] : s.reserved_bytes_by_private_pools) {
    for (auto& stat : array) {
      fn(stat);
    }
  }
  fn(s.oversize_allocations);
  fn(s.oversize_segments);
}
} // namespace

void EmuDeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  DeviceCache& dc = cache(device);
  CacheLock guard(dc);
  auto& s = dc.stats;
  for_each_stat(s, [](c10::CachingAllocator::Stat& stat) { stat.reset_accumulated(); });
  s.num_alloc_retries = 0;
  s.num_ooms = 0;
  s.num_sync_all_streams = 0;
  s.num_device_alloc = 0;
  s.num_device_free = 0;
}

void EmuDeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  DeviceCache& dc = cache(device);
  CacheLock guard(dc);
  for_each_stat(dc.stats, [](c10::CachingAllocator::Stat& stat) { stat.reset_peak(); });
}

std::pair<size_t, size_t> EmuDeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  check_device_index(device);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  EMU_CHECK(emuMemGetInfo(device, &free_bytes, &total_bytes));
  return {free_bytes, total_bytes};
}

// LITERALINCLUDE START: DEVICE_ALLOCATOR_REGISTER
bool is_device_ptr(const void* ptr) {
  emuPointerAttributes attr{};
  return emuPointerGetAttributes(&attr, ptr) == emuSuccess && attr.type == emuMemoryTypeDevice;
}

EmuDeviceAllocator* device_allocator() {
  // Never destroyed: tensors may still be freed after static destructors ran.
  static auto* instance = new EmuDeviceAllocator();
  return instance;
}

// c10::GetAllocator(PrivateUse1) now returns our allocator: every emu tensor
// (torch.empty(..., device="emu")) and torch.accelerator.memory.* use it.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, device_allocator())
// LITERALINCLUDE END: DEVICE_ALLOCATOR_REGISTER

} // namespace torch_emu
