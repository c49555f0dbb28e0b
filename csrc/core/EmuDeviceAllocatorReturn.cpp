// The caching allocator's blocks going back to their pools: a freed block
// merged with its free neighbours (return_to_pool) or parked for the next
// allocation of its size on its stream (park_block), and the Block objects
// and pool nodes that a split and a merge reuse. Allocation is
// EmuDeviceAllocator.cpp's.
#include "core/EmuDeviceAllocatorState.h"

#include <algorithm>
#include <utility>

#include "core/EmuKernelContext.h"

namespace torch_emu {

using c10::CachingDeviceAllocator::TraceEntry;

// A small tensor's allocation splits a cached block and its free merges the
// halves again: so that this costs no malloc, the Block object a merge gives
// up serves the next split, and pool nodes are moved between the pools' sets
// (extract, then insert) rather than freed and allocated again.
Block* new_block(DeviceCache& dc, c10::Stream stream, size_t size, bool small, void* ptr, PrivatePool* pool) {
  if (Block* block = std::exchange(dc.spare_block, nullptr)) {
    *block = Block(stream, size, small, ptr, pool);
    return block;
  }
  return new Block(stream, size, small, ptr, pool);
}

namespace {

void drop_block(DeviceCache& dc, Block* block) {
  if (dc.spare_block == nullptr) {
    dc.spare_block = block;
  } else {
    delete block;
  }
}

} // namespace

// Puts `block` into `pool`, in `node` (a node extracted from a pool) if it has one.
void insert_block(BlockPool& pool, Block* block, BlockPool::node_type& node) {
  if (node) {
    node.value() = block;
    pool.insert(std::move(node));
  } else {
    pool.insert(block);
  }
}

namespace {

// LITERALINCLUDE START: DEVICE_ALLOCATOR_FREE
// A block nobody uses any more stops counting as active...
void count_inactive(DeviceCache& dc, Block* block) {
  auto& stats = dc.stats;
  update_stat(stats.active, block->small, -1);
  update_stat(stats.active_bytes, block->small, -static_cast<int64_t>(block->size));
  update_stat(stats.requested_bytes, block->small, -static_cast<int64_t>(block->requested_size));
  block->requested_size = 0;
  block->context.reset();
  block->freed_at = stream_order_now();
}

// ...and goes back to its pool, merged with free neighbours so that the
// segment can become whole again (and be released).
void merge_into_pool(DeviceCache& dc, Block* block) {
  BlockPool& pool = dc.pool(block->small, block->pool);
  // inactive_split counts cached blocks that are only part of a segment.
  int64_t split_blocks = 0;
  int64_t split_bytes = 0;
  BlockPool::node_type node;
  for (Block* neighbour : {block->prev, block->next}) {
    if (neighbour == nullptr || !neighbour->is_cached()) {
      continue;
    }
    node = pool.extract(neighbour);
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
    drop_block(dc, neighbour);
  }
  if (block->is_split()) {
    split_blocks += 1;
    split_bytes += static_cast<int64_t>(block->size);
  }
  insert_block(pool, block, node);
  update_stat(dc.stats.inactive_split, block->small, split_blocks);
  update_stat(dc.stats.inactive_split_bytes, block->small, split_bytes);
}

} // namespace

void return_to_pool(DeviceCache& dc, Block* block) {
  if (C10_UNLIKELY(dc.max_entries > 0)) {
    record_trace(dc, TraceEntry::FREE_COMPLETED, block->ptr, block->size, block->stream, pool_id(block), nullptr);
  }
  count_inactive(dc, block);
  merge_into_pool(dc, block);
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_FREE

// LITERALINCLUDE START: DEVICE_ALLOCATOR_PARKED
// What eager code does all the time: an op frees a temporary and the next
// one allocates a tensor of the same size on the same stream. Merging the
// freed block into its pool and splitting it out again costs two tree
// searches, two node moves and four statistics more each way, a third of
// the allocator's time per op. So a freed block of the default pools is
// parked as it is, in one of a few slots of its device, and an allocation of
// the same rounded size on the same stream takes it back. Anything else
// first merges the parked blocks into their pools: a miss, emptyCache, and
// every reader of the pools and statistics (CacheLock). Pools, segments
// and the current statistics are thus those of eager merging; only the peak
// of inactive_split can be lower, since a parked block never counted in it.
bool park_block(DeviceCache& dc, Block* block) {
  if (block->pool != nullptr || C10_UNLIKELY(dc.max_entries > 0) ||
      dc.parked_count == DeviceCache::kParkedSlots) {
    return false;
  }
  count_inactive(dc, block);
  block->parked = true;
  dc.parked[dc.parked_count++] = block;
  return true;
}

// A parked block of exactly `size` on `stream` (newest first), or nullptr.
// As take_cached, a queued kernel only takes blocks freed before its launch.
Block* take_parked(DeviceCache& dc, const c10::Stream& stream, size_t size) {
  for (int i = dc.parked_count - 1; i >= 0; --i) {
    Block* block = dc.parked[i];
    if (block->size != size || block->stream != stream) {
      continue;
    }
    const uint64_t launched_at = queued_kernel_launch_order();
    if (launched_at != 0 && block->freed_at >= launched_at) {
      return nullptr;
    }
    std::copy(dc.parked + i + 1, dc.parked + dc.parked_count, dc.parked + i);
    dc.parked_count -= 1;
    block->parked = false;
    return block;
  }
  return nullptr;
}

void merge_parked(DeviceCache& dc) {
  while (dc.parked_count > 0) {
    Block* block = dc.parked[--dc.parked_count];
    block->parked = false;
    merge_into_pool(dc, block);
  }
}
// LITERALINCLUDE END: DEVICE_ALLOCATOR_PARKED

} // namespace torch_emu
