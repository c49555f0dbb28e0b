#include "core/EmuDeviceAllocator.h"
#include "core/EmuDeviceAllocatorState.h"

#include "core/EmuException.h"

namespace torch_emu {

using c10::CachingAllocator::format_size;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::TraceEntry;

namespace {

constexpr auto kAggregate = static_cast<size_t>(StatType::AGGREGATE);

} // namespace

// Reserved bytes also count per private pool (reserved_bytes_by_private_pools).
void update_reserved(DeviceCache& dc, const Block* segment, int64_t delta) {
  update_stat(dc.stats.reserved_bytes, segment->small, delta);
  if (segment->pool != nullptr) {
    update_stat(dc.stats.reserved_bytes_by_private_pools[segment->pool->id], segment->small, delta);
  }
}

// torch.profiler(profile_memory=True) sees every allocation and free.
void report_to_profiler(DeviceCache& dc, void* ptr, int64_t delta) {
  c10::reportMemoryUsageToProfiler(
      ptr, delta, static_cast<size_t>(dc.stats.allocated_bytes[kAggregate].current),
      static_cast<size_t>(dc.stats.reserved_bytes[kAggregate].current),
      c10::Device(c10::DeviceType::PrivateUse1, dc.index));
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

} // namespace torch_emu
