// The caching allocator behind every emu tensor.
//
// Getting device memory from the runtime (emuMalloc) is expensive, so, like
// torch.cuda, we keep freed memory cached and hand it out again: segments
// obtained from the runtime are split into blocks, a freed block is reused by
// later allocations on the same stream and coalesced with free neighbours.
// emptyCache() gives unused segments back to the device. Registered for
// PrivateUse1, so torch.empty(..., device="emu") and torch.accelerator.memory.*
// reach it through c10::GetAllocator / c10::getDeviceAllocator.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/flat_hash_map.h>

#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace torch_emu {

// Defined in EmuDeviceAllocator.cpp.
struct Block;       // a range of a segment: allocated, pending, or cached
struct DeviceCache; // everything the allocator keeps for one device

class EmuDeviceAllocator final : public c10::DeviceAllocator {
 public:
  // c10::Allocator
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, size_t count) const override;

  // c10::DeviceAllocator
  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(
      c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // The stream the block starting at `ptr` was allocated on; nullopt if no
  // allocated block starts there. The caller keeps the block alive.
  std::optional<c10::Stream> allocation_stream(const void* ptr);

 private:
  Block* find_block(const void* ptr); // the allocated block starting at `ptr`
  static void deleter(void* ptr); // the DataPtr deleter: back to the cache
  void free(void* ptr);
  DeviceCache& cache(c10::DeviceIndex device);

  std::once_flag caches_once_;
  std::vector<DeviceCache*> caches_; // one per device, created on first use
  std::mutex blocks_mutex_;
  ska::flat_hash_map<void*, Block*> allocated_blocks_; // by data pointer
};

// The process-wide instance (also what c10::GetAllocator(PrivateUse1) returns).
EmuDeviceAllocator* device_allocator();

// Whether `ptr` points into emu device memory (any device, any allocation).
bool is_device_ptr(const void* ptr);

} // namespace torch_emu
