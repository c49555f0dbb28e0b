// The caching allocator: freed blocks stay reserved for reuse, with the
// CUDA-style statistics torch.accelerator.memory_stats() reports, and an
// out-of-memory error (torch.OutOfMemoryError) after the cache was given back.
// Guide: torch-emu docs/guide/memory.md
#include <c10/core/CachingDeviceAllocator.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/check.h"

namespace torch_tpldev {
namespace {

using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr size_t kRound = 512;             // every block is a multiple of this
constexpr size_t kSmallBlock = 1 << 20;    // blocks up to 1 MiB count as the "small pool"

// LITERALINCLUDE START: ALLOCATOR_IMPL
class CachingAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    int device = 0;
    TPLDEV_CHECK(tpldevGetDevice(&device));
    const c10::Device where(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, where);
    }
    const size_t size = (nbytes + kRound - 1) / kRound * kRound;
    std::lock_guard<std::mutex> lock(mutex_);
    PerDevice& d = device_state(device);
    void* ptr = take_cached(d, size);
    if (ptr == nullptr) {
      ptr = malloc_or_throw(d, device, size);
    }
    live_[ptr] = {device, size, nbytes};
    update(d.stats, size, &DeviceStats::allocation, 1, +1);
    update(d.stats, size, &DeviceStats::active, 1, +1);
    update(d.stats, size, &DeviceStats::allocated_bytes, size, +1);
    update(d.stats, size, &DeviceStats::active_bytes, size, +1);
    update(d.stats, size, &DeviceStats::requested_bytes, nbytes, +1);
    return c10::DataPtr(ptr, ptr, &release, where);
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &release;
  }

  void copy_data(void* dest, const void* src, size_t count) const override {
    TPLDEV_CHECK(tpldevMemcpy(dest, src, count));
  }

  bool initialized() override {
    return true;
  }

  // Gives every cached (unused) block of every device back to the driver.
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (PerDevice& d : devices_) {
      release_cache(d);
    }
  }

  // One stream per device and synchronous work: a block is reusable as soon as it is freed.
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {}

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return device_state(device).stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for_each_stat(device_state(device).stats, [](c10::CachingAllocator::Stat& s) { s.reset_accumulated(); });
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for_each_stat(device_state(device).stats, [](c10::CachingAllocator::Stat& s) { s.reset_peak(); });
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    size_t free_bytes = 0, total_bytes = 0;
    TPLDEV_CHECK(tpldevMemGetInfo(device, &free_bytes, &total_bytes));
    return {free_bytes, total_bytes};
  }

 private:
  struct PerDevice {
    std::multimap<size_t, void*> cache; // size -> free block, for best fit
    DeviceStats stats;
  };
  struct Block {
    int device;
    size_t size;
    size_t requested;
  };

  static void release(void* ptr);

  PerDevice& device_state(int device) {
    TORCH_CHECK(device >= 0 && device < tpldevDeviceCount(), "invalid tpldev device index ", device);
    if (devices_.empty()) {
      devices_.resize(tpldevDeviceCount());
    }
    return devices_[device];
  }

  // Adds (sign +1) or removes (-1) `amount` to one statistic, overall and in the block's pool.
  static void update(DeviceStats& stats, size_t block_size, c10::CachingAllocator::StatArray DeviceStats::*field,
                     size_t amount, int sign) {
    const StatType pool = block_size <= kSmallBlock ? StatType::SMALL_POOL : StatType::LARGE_POOL;
    for (StatType type : {StatType::AGGREGATE, pool}) {
      auto& stat = (stats.*field)[static_cast<size_t>(type)];
      sign > 0 ? stat.increase(amount) : stat.decrease(amount);
    }
  }

  template <class F>
  static void for_each_stat(DeviceStats& s, F f) {
    for (auto* array : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                        &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes}) {
      for (auto& stat : *array) {
        f(stat);
      }
    }
    f(s.oversize_allocations);
    f(s.oversize_segments);
  }

  // The smallest cached block that fits without wasting more than half of it.
  void* take_cached(PerDevice& d, size_t size) {
    auto it = d.cache.lower_bound(size);
    if (it == d.cache.end() || it->first >= 2 * size) {
      return nullptr;
    }
    void* ptr = it->second;
    d.cache.erase(it);
    return ptr;
  }

  void* malloc_or_throw(PerDevice& d, int device, size_t size) {
    void* ptr = nullptr;
    tpldevError err = tpldevMalloc(&ptr, size);
    if (err == tpldevErrorOutOfMemory && !d.cache.empty()) {
      release_cache(d); // the cache holds memory nobody uses: give it back and retry
      err = tpldevMalloc(&ptr, size);
    }
    if (err == tpldevErrorOutOfMemory) {
      d.stats.num_ooms += 1;
      size_t free_bytes = 0, total_bytes = 0;
      TPLDEV_CHECK(tpldevMemGetInfo(device, &free_bytes, &total_bytes));
      TORCH_CHECK_WITH(OutOfMemoryError, false, "tpldev out of memory: tried to allocate ", size,
                       " bytes on device ", device, " (", free_bytes, " of ", total_bytes, " bytes free, ",
                       d.stats.allocated_bytes[0].current, " allocated by PyTorch)");
    }
    TPLDEV_CHECK(err);
    d.stats.num_device_alloc += 1;
    update(d.stats, size, &DeviceStats::segment, 1, +1);
    update(d.stats, size, &DeviceStats::reserved_bytes, size, +1);
    return ptr;
  }

  void release_cache(PerDevice& d) {
    for (const auto& [size, ptr] : d.cache) {
      TPLDEV_CHECK(tpldevFree(ptr));
      d.stats.num_device_free += 1;
      update(d.stats, size, &DeviceStats::segment, 1, -1);
      update(d.stats, size, &DeviceStats::reserved_bytes, size, -1);
    }
    d.cache.clear();
  }

  void free_block(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    TORCH_INTERNAL_ASSERT(it != live_.end(), "freeing a pointer this allocator does not own");
    const Block b = it->second;
    live_.erase(it);
    PerDevice& d = devices_[b.device];
    update(d.stats, b.size, &DeviceStats::allocation, 1, -1);
    update(d.stats, b.size, &DeviceStats::active, 1, -1);
    update(d.stats, b.size, &DeviceStats::allocated_bytes, b.size, -1);
    update(d.stats, b.size, &DeviceStats::active_bytes, b.size, -1);
    update(d.stats, b.size, &DeviceStats::requested_bytes, b.requested, -1);
    d.cache.emplace(b.size, ptr);
  }

  std::mutex mutex_;
  std::vector<PerDevice> devices_;
  std::unordered_map<void*, Block> live_;
};

// Never destroyed: tensors that outlive static destructors still free into it.
CachingAllocator* const allocator = new CachingAllocator();

void CachingAllocator::release(void* ptr) {
  allocator->free_block(ptr);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, allocator);
// LITERALINCLUDE END: ALLOCATOR_IMPL

} // namespace
} // namespace torch_tpldev
