#include "core/EmuDeviceAllocator.h"
#include "core/EmuDeviceAllocatorState.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
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

// Frees the segments `dc` gave up so far, with dc.mutex released meanwhile
// (held by `lock`, which it leaves unlocked).
void free_given_up_segments(DeviceCache& dc, std::unique_lock<std::mutex>& lock) {
  if (C10_LIKELY(dc.segments_to_free.empty())) {
    lock.unlock();
    return;
  }
  const std::vector<void*> segments = std::exchange(dc.segments_to_free, {});
  lock.unlock();
  for (void* ptr : segments) {
    const emuError_t err = emuFree(ptr); // emuFree finds the device from the pointer
    if (err != emuSuccess) {
      TORCH_WARN("emu allocator: freeing a cached segment failed: ", emuGetLastErrorMessage());
    }
  }
}

// For a retry that needs the memory back now: frees the segments given up so
// far with dc.mutex (held by a CacheLock up the stack) released meanwhile.
void free_segments_now(DeviceCache& dc) {
  std::unique_lock<std::mutex> lock(dc.mutex, std::adopt_lock);
  free_given_up_segments(dc, lock);
  lock.lock();
  lock.release(); // the CacheLock up the stack owns it again
}

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

} // namespace

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

namespace {

// What emptyCache() and an out-of-memory retry release: the default pools and
// the pools nobody uses any more.
void release_cached_segments(DeviceCache& dc) {
  merge_parked(dc);
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
} // namespace

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

namespace {

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
// The block comes in the node that held it (empty: none fits).
BlockPool::node_type take_cached(BlockPool& pool, const c10::Stream& stream, size_t size, bool small) {
  Block key(stream, size, small, nullptr);
  const uint64_t launched_at = queued_kernel_launch_order();
  for (auto it = pool.lower_bound(&key); it != pool.end() && (*it)->stream == stream; ++it) {
    const Block* block = *it;
    if (launched_at == 0 || block->freed_at < launched_at) {
      return pool.extract(it);
    }
  }
  return {};
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_QUEUED_REUSE

// Out of memory: pools created with use_on_oom lend their cached blocks.
BlockPool::node_type take_from_oom_pools(DeviceCache& dc, const c10::Stream& stream, size_t size, bool small) {
  for (auto& [id, pool] : dc.private_pools) {
    if (pool->use_on_oom) {
      if (BlockPool::node_type node = take_cached(dc.pool(small, pool.get()), stream, size, small)) {
        return node;
      }
    }
  }
  return {};
}

// LITERALINCLUDE START: DEVICE_ALLOCATOR_MALLOC
// Takes `size` bytes on `stream` from the pools: best fit among the cached
// blocks of that stream in the routed pool (only they are safe to reuse
// without synchronisation), else a new segment; the block is split when what
// remains is worth keeping. nullptr when out of memory.
Block* take_from_pools(DeviceCache& dc, size_t size, bool small, const c10::Stream& stream,
                       PrivatePool* private_pool, const std::shared_ptr<c10::GatheredContext>& context) {
  merge_parked(dc); // the pools as eager merging leaves them
  BlockPool& pool = dc.pool(small, private_pool);
  BlockPool::node_type node = take_cached(pool, stream, size, small);
  Block* block = node ? node.value() : new_segment(dc, stream, size, small, private_pool, context);
  if (block == nullptr && private_pool == nullptr) {
    node = take_from_oom_pools(dc, stream, size, small);
    block = node ? node.value() : nullptr;
  }
  if (block == nullptr) {
    return nullptr;
  }
  auto& stats = dc.stats;
  const bool was_split = block->is_split();
  const size_t remaining = block->size - size;
  const bool no_split = block->pool != nullptr && block->pool->no_split;
  if (!no_split && (small ? remaining >= kMinBlockSize : remaining > kSmallSize)) {
    Block* rest = new_block(dc, stream, remaining, small, static_cast<char*>(block->ptr) + size, block->pool);
    rest->freed_at = block->freed_at; // still cached since then
    rest->prev = block;
    rest->next = block->next;
    if (rest->next != nullptr) {
      rest->next->prev = rest;
    }
    block->next = rest;
    block->size = size;
    insert_block(dc.pool(small, block->pool), rest, node);
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
  return block;
}

// Serves `nbytes` on `stream`: a parked block of that size, else one from the
// pools. Out of memory: raises if `raise_oom_error`, else returns nullptr.
Block* malloc_block(DeviceCache& dc, size_t nbytes, c10::Stream stream,
                    const std::shared_ptr<c10::GatheredContext>& context, bool raise_oom_error) {
  dc.mutex.lock();
  CacheLock guard(dc, std::adopt_lock); // parked blocks stay parked
  process_events(dc);
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  PrivatePool* private_pool = routed_pool(dc, stream);
  Block* block = private_pool == nullptr ? take_parked(dc, stream, size) : nullptr;
  if (block == nullptr) {
    block = take_from_pools(dc, size, small, stream, private_pool, context);
  }
  if (block == nullptr) {
    if (!raise_oom_error) {
      return nullptr;
    }
    raise_oom(dc, size, stream);
  }

  auto& stats = dc.stats;
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
  dc.allocated.emplace(block->ptr, block);
  return block;
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_MALLOC

std::atomic<size_t (*)()> g_release_before_oom{nullptr};

} // namespace

bool small_request(size_t size) {
  return size <= kSmallSize;
}

CacheLock::~CacheLock() {
  free_given_up_segments(dc_, lock_);
}

void set_release_before_oom(size_t (*release)()) {
  g_release_before_oom.store(release, std::memory_order_release);
}

DeviceCache& EmuDeviceAllocator::cache(c10::DeviceIndex device) {
  c10::call_once(caches_once_, [this] {
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
  const LiveBlock live = lock_live_block(ptr, /*take=*/true);
  TORCH_CHECK(live.block != nullptr, "emu allocator: invalid device pointer ", ptr);
  DeviceCache& dc = *live.cache;
  CacheLock guard(dc, std::adopt_lock);
  Block* block = live.block;
  block->allocated = false;
  update_stat(dc.stats.allocation, block->small, -1);
  update_stat(dc.stats.allocated_bytes, block->small, -static_cast<int64_t>(block->size));
  report_to_profiler(dc, block->ptr, -static_cast<int64_t>(block->size));
  if (C10_UNLIKELY(dc.max_entries > 0)) {
    record_trace(dc, TraceEntry::FREE_REQUESTED, block->ptr, block->requested_size, block->stream,
                 pool_id(block), std::move(context));
  }
  if (block->stream_uses.empty()) {
    if (!park_block(dc, block)) {
      return_to_pool(dc, block);
    }
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

// LITERALINCLUDE START: DEVICE_ALLOCATOR_RECORD_STREAM_API
// tensor.record_stream(s): the memory is used on `s` too, so on free it must
// not be reused before the work queued on `s` by then has completed.
void EmuDeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr || ptr.get_deleter() != &deleter || pluggable_ != nullptr) {
    return; // empty, not our memory, or not cached (pluggable)
  }
  const LiveBlock live = lock_live_block(ptr.get(), /*take=*/false);
  if (live.block == nullptr) {
    return;
  }
  CacheLock guard(*live.cache, std::adopt_lock);
  Block* block = live.block;
  auto& uses = block->stream_uses;
  if (stream != block->stream && std::find(uses.begin(), uses.end(), stream) == uses.end()) {
    uses.push_back(stream);
  }
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_RECORD_STREAM_API

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
