#include "core/EmuDeviceAllocator.h"
#include "core/EmuDeviceAllocatorState.h"

#include <c10/util/ApproximateClock.h>

#include <algorithm>
#include <set>

#include "core/EmuStream.h"

namespace torch_emu {

using c10::CachingAllocator::format_size;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::TraceEntry;

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
    for (const auto& [ptr, block] : dc.allocated) {
      blocks.push_back(block);
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

} // namespace torch_emu
