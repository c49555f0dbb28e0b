#include "core/EmuDeviceAllocator.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <set>

#include "core/EmuException.h"
#include "core/EmuStream.h"
#include "runtime/emu_runtime.h"

namespace torch_emu {

using c10::CachingAllocator::format_size;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;

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

// A range of one segment (one emuMalloc). It is allocated (handed out), pending
// (freed, but waiting for events of streams added by recordStream) or cached
// (in its pool). Neighbours in the segment are linked so that free ranges can
// be coalesced; `stream` is the segment's allocation stream.
struct Block {
  Block(c10::Stream stream, size_t size, bool small, void* ptr)
      : stream(stream), size(size), small(small), ptr(ptr) {}

  c10::Stream stream;
  size_t size;
  bool small; // which pool: every block of a segment is in the same one
  void* ptr;
  size_t requested_size = 0; // what the caller asked for (before rounding)
  bool allocated = false;
  int event_count = 0; // events still to complete before reuse
  ska::flat_hash_set<c10::Stream> stream_uses; // from recordStream
  Block* prev = nullptr;
  Block* next = nullptr;

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

struct DeviceCache {
  explicit DeviceCache(c10::DeviceIndex index) : index(index) {
    // We split blocks of any size (no max_split_size_mb); -1 is what CUDA
    // reports when that limit is unset.
    stats.max_split_size = -1;
  }

  BlockPool& pool(bool small) {
    return small ? small_blocks : large_blocks;
  }

  const c10::DeviceIndex index;
  std::mutex mutex; // guards everything below and the Blocks of this device
  c10::CachingDeviceAllocator::DeviceStats stats;
  BlockPool small_blocks;
  BlockPool large_blocks;
  std::vector<std::pair<emuEvent_t, Block*>> pending_events;
  std::vector<emuEvent_t> spare_events; // completed events, ready for reuse
};

namespace {

// LITERALINCLUDE START: DEVICE_ALLOCATOR_FREE
// A block nobody uses any more goes back to its pool, merged with free
// neighbours so that the segment can become whole again (and be released).
void return_to_pool(DeviceCache& dc, Block* block) {
  const size_t size = block->size;
  const size_t requested = block->requested_size;
  BlockPool& pool = dc.pool(block->small);
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
    split_blocks -= 1;
    split_bytes -= static_cast<int64_t>(neighbour->size);
    delete neighbour;
  }
  if (block->is_split()) {
    split_blocks += 1;
    split_bytes += static_cast<int64_t>(block->size);
  }
  block->requested_size = 0;
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

// Gives every cached, unsplit segment of the device back to the runtime.
// Split segments stay: part of them is still in use.
void release_cached_segments(DeviceCache& dc) {
  process_events(dc);
  for (bool small : {true, false}) {
    BlockPool& pool = dc.pool(small);
    for (auto it = pool.begin(); it != pool.end();) {
      Block* block = *it;
      if (block->is_split()) {
        ++it;
        continue;
      }
      EMU_CHECK(emuFree(block->ptr)); // emuFree finds the device from the pointer
      update_stat(dc.stats.segment, small, -1);
      update_stat(dc.stats.reserved_bytes, small, -static_cast<int64_t>(block->size));
      dc.stats.num_device_free += 1;
      it = pool.erase(it);
      delete block;
    }
  }
}

// LITERALINCLUDE START: DEVICE_ALLOCATOR_OOM
// Gets a new segment from the runtime. If the device is full, release what the
// cache holds and retry once; if that fails too, raise torch.OutOfMemoryError
// with the numbers a user needs to understand it. Nothing but num_ooms records
// a failed request.
Block* new_segment(DeviceCache& dc, c10::Stream stream, size_t size, bool small) {
  const size_t bytes = segment_size(size);
  void* ptr = nullptr;
  emuError_t err = emuMalloc(&ptr, bytes);
  if (err == emuErrorMemoryAllocation) {
    release_cached_segments(dc);
    dc.stats.num_alloc_retries += 1;
    err = emuMalloc(&ptr, bytes);
  }
  if (err == emuErrorMemoryAllocation) {
    dc.stats.num_ooms += 1;
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    EMU_CHECK(emuMemGetInfo(dc.index, &free_bytes, &total_bytes));
    constexpr auto agg = static_cast<size_t>(StatType::AGGREGATE);
    const auto allocated = static_cast<uint64_t>(dc.stats.allocated_bytes[agg].current);
    const auto reserved = static_cast<uint64_t>(dc.stats.reserved_bytes[agg].current);
    TORCH_CHECK_WITH(OutOfMemoryError, false,
        "emu out of memory. Tried to allocate ", format_size(size), ". emu:",
        static_cast<int>(dc.index), " has a total capacity of ", format_size(total_bytes),
        " of which ", format_size(free_bytes), " is free. Of the allocated memory ",
        format_size(allocated), " is allocated by PyTorch, and ",
        format_size(reserved - allocated), " is reserved by PyTorch but unallocated.");
  }
  EMU_CHECK(err);
  update_stat(dc.stats.segment, small, 1);
  update_stat(dc.stats.reserved_bytes, small, static_cast<int64_t>(bytes));
  dc.stats.num_device_alloc += 1;
  return new Block(stream, bytes, small, ptr);
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_OOM

// LITERALINCLUDE START: DEVICE_ALLOCATOR_MALLOC
// Serves `nbytes` on `stream`: best fit among the cached blocks of that stream
// (only they are safe to reuse without synchronisation), else a new segment;
// the block is split when what remains is worth keeping.
Block* malloc_block(DeviceCache& dc, size_t nbytes, c10::Stream stream) {
  std::lock_guard<std::mutex> guard(dc.mutex);
  process_events(dc);
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  BlockPool& pool = dc.pool(small);

  Block key(stream, size, small, nullptr);
  auto it = pool.lower_bound(&key);
  Block* block = nullptr;
  if (it != pool.end() && (*it)->stream == stream) {
    block = *it;
    pool.erase(it);
  } else {
    block = new_segment(dc, stream, size, small);
  }

  auto& stats = dc.stats;
  const bool was_split = block->is_split();
  const size_t remaining = block->size - size;
  if (small ? remaining >= kMinBlockSize : remaining > kSmallSize) {
    auto* rest = new Block(stream, remaining, small, static_cast<char*>(block->ptr) + size);
    rest->prev = block;
    rest->next = block->next;
    if (rest->next != nullptr) {
      rest->next->prev = rest;
    }
    block->next = rest;
    block->size = size;
    pool.insert(rest);
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
  return block;
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_MALLOC

} // namespace

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
  Block* block = malloc_block(cache(device), nbytes, current_stream(device));
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
  Block* block = nullptr;
  {
    std::lock_guard<std::mutex> guard(blocks_mutex_);
    auto it = allocated_blocks_.find(ptr);
    TORCH_CHECK(it != allocated_blocks_.end(), "emu allocator: invalid device pointer ", ptr);
    block = it->second;
    allocated_blocks_.erase(it);
  }
  DeviceCache& dc = cache(block->stream.device_index());
  std::lock_guard<std::mutex> guard(dc.mutex);
  block->allocated = false;
  update_stat(dc.stats.allocation, block->small, -1);
  update_stat(dc.stats.allocated_bytes, block->small, -static_cast<int64_t>(block->size));
  if (block->stream_uses.empty()) {
    return_to_pool(dc, block);
  } else {
    record_events(dc, block);
  }
  process_events(dc);
}

void EmuDeviceAllocator::copy_data(void* dest, const void* src, size_t count) const {
  EMU_CHECK(emuMemcpy(dest, src, count, emuMemcpyDeviceToDevice));
}

bool EmuDeviceAllocator::initialized() {
  return true; // usable as soon as it is registered; devices start lazily
}

void EmuDeviceAllocator::emptyCache(c10::MempoolId_t mempool_id) {
  TORCH_CHECK(mempool_id == c10::MempoolId_t(0, 0),
              "emu allocator: private memory pools are not supported");
  for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
    DeviceCache& dc = cache(i);
    std::lock_guard<std::mutex> guard(dc.mutex);
    release_cached_segments(dc);
  }
}

// LITERALINCLUDE START: DEVICE_ALLOCATOR_RECORD_STREAM_API
// tensor.record_stream(s): the memory is used on `s` too, so on free it must
// not be reused before the work queued on `s` by then has completed.
void EmuDeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  if (ptr.get() == nullptr || ptr.get_deleter() != &deleter) {
    return; // empty, or not our memory
  }
  Block* block = find_block(ptr.get());
  if (block == nullptr) {
    return;
  }
  DeviceCache& dc = cache(block->stream.device_index());
  std::lock_guard<std::mutex> guard(dc.mutex);
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
  std::lock_guard<std::mutex> guard(dc.mutex);
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
  fn(s.oversize_allocations);
  fn(s.oversize_segments);
}
} // namespace

void EmuDeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  DeviceCache& dc = cache(device);
  std::lock_guard<std::mutex> guard(dc.mutex);
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
  std::lock_guard<std::mutex> guard(dc.mutex);
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
