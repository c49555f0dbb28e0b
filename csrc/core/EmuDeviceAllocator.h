// The caching allocator behind every emu tensor.
//
// Getting device memory from the runtime (emuMalloc) is expensive, so, like
// torch.cuda, we keep freed memory cached and hand it out again: segments
// obtained from the runtime are split into blocks, a freed block is reused by
// later allocations on the same stream and coalesced with free neighbours.
// emptyCache() gives unused segments back to the device. Registered for
// PrivateUse1, so torch.empty(..., device="emu") and torch.accelerator.memory.*
// reach it through c10::GetAllocator / c10::getDeviceAllocator.
//
// Beyond c10::DeviceAllocator it has CUDA's private memory pools (MemPool,
// graph capture), a per-process memory fraction, a pluggable backend loaded
// from a user's shared library, and an allocation history for snapshots.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/CallOnce.h>
#include <c10/util/flat_hash_map.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace torch_emu {

// Defined in EmuDeviceAllocatorState.h (the allocator's own files only).
struct Block;       // a range of a segment: allocated, pending, or cached
struct DeviceCache; // everything the allocator keeps for one device

// A user's alloc/free pair (torch.emu.memory.EmuPluggableAllocator), with the
// signatures of CUDAPluggableAllocator's functions; `stream` is an emuStream_t.
// `alloc` must return emu device memory (e.g. from emuMalloc) or nullptr.
struct PluggableAllocatorFns {
  void* (*alloc)(size_t size, int device, void* stream) = nullptr;
  void (*free)(void* ptr, size_t size, int device, void* stream) = nullptr;
};

// The allocator's state, as torch.emu.memory._snapshot() reports it.
struct AllocatorSnapshot {
  std::vector<c10::CachingDeviceAllocator::SegmentInfo> segments;
  std::vector<std::vector<c10::CachingDeviceAllocator::TraceEntry>> device_traces;
};

class EmuDeviceAllocator final : public c10::DeviceAllocator {
 public:
  // c10::Allocator
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, size_t count) const override;

  // c10::DeviceAllocator
  bool initialized() override;
  // {0, 0}: the unused segments of the default pools and of released private
  // pools; a pool id: the unused segments of that pool only.
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

  // LITERALINCLUDE START: POOL_API
  // Private memory pools, with the names and meaning of CUDA's caching
  // allocator. A pool is created with use count 1 by createOrIncrefPool (a
  // MemPool) or by beginAllocateToPool (graph capture); every
  // beginAllocateToPool adds a user, every releasePool removes one. While
  // routed, allocations on `device` whose stream passes `filter` are served
  // from the pool's own segments; the most recent matching route wins. A pool
  // whose use count reached 0 keeps its segments while blocks are allocated
  // in them; emptyCache() releases its unused ones and then the pool.
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                          std::shared_ptr<PluggableAllocatorFns> allocator = nullptr,
                          bool use_on_oom = false, bool no_split = false);
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                           std::function<bool(c10::Stream)> filter);
  // beginAllocateToPool for the allocations of the calling thread (and of the
  // kernels it launches), as torch.emu.use_mem_pool routes them.
  void beginAllocateCurrentThreadToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id);
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id);
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id);
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id);
  // A fresh pool id, as at::cuda::MemPool::graph_pool_handle: {0, n} for
  // user-created pools and graph_pool_handle(), {n, 0} for ids made by a
  // graph capture itself.
  static c10::MempoolId_t graph_pool_handle(bool is_user_created = true);
  // LITERALINCLUDE END: POOL_API

  // caching_allocator_delete: frees memory from allocate() by its pointer;
  // raises for a pointer this allocator did not hand out.
  void raw_delete(void* ptr);
  // caching_allocator_enable(false): freed memory is given back to the device
  // at once instead of being cached (for debugging with a memory checker).
  void setCachingEnabled(bool enabled);
  bool isCachingEnabled() const {
    return caching_enabled_.load();
  }

  // Caps what the cache may reserve on `device` to fraction * capacity.
  void setMemoryFraction(double fraction, c10::DeviceIndex device);
  double getMemoryFraction(c10::DeviceIndex device);

  // Replaces the caching allocator by a user's alloc/free for every later
  // allocation (torch.emu.memory.change_current_allocator). Only before the
  // first emu allocation of the process.
  void setPluggable(std::shared_ptr<PluggableAllocatorFns> fns);
  bool isPluggable() const {
    return pluggable_ != nullptr;
  }

  // Allocation history (torch.emu.memory._record_memory_history): trace
  // entries of the last `max_entries` events per device, except the actions
  // in `skip_actions` (a bit per TraceEntry::Action), with the context
  // `gather` returns (Python frames) for the actions `when` asks for.
  // Disabling, or clear_history, drops the entries recorded so far.
  void recordHistory(bool enabled, c10::CachingDeviceAllocator::CreateContextFn gather,
                     size_t max_entries, c10::CachingDeviceAllocator::RecordContext when,
                     bool clear_history = false, uint32_t skip_actions = 0);
  AllocatorSnapshot snapshot(c10::MempoolId_t mempool_id = {0, 0}, bool include_traces = true);

 private:
  // The live allocation starting at `ptr` and its device's cache, whose
  // mutex is left locked (the caller adopts it: CacheLock(dc, std::adopt_lock));
  // `take`: no longer live. {nullptr, nullptr}: not a live allocation.
  struct LiveBlock {
    DeviceCache* cache;
    Block* block;
  };
  LiveBlock lock_live_block(const void* ptr, bool take);
  Block* find_block(const void* ptr); // the allocated block starting at `ptr`
  static void deleter(void* ptr); // the DataPtr deleter: back to the cache
  void free(void* ptr);
  c10::DataPtr allocate_pluggable(size_t nbytes, c10::DeviceIndex device);
  void free_pluggable(void* ptr);
  std::shared_ptr<c10::GatheredContext> gather_context(bool on_free);
  DeviceCache& cache(c10::DeviceIndex device);

  c10::once_flag caches_once_; // c10's: tests a flag first, where std::call_once writes thread-locals
  std::vector<DeviceCache*> caches_; // one per device, created on first use
  std::atomic<bool> allocated_once_{false};
  std::atomic<bool> caching_enabled_{true};
  std::shared_ptr<PluggableAllocatorFns> pluggable_;
  std::atomic<bool> recording_{false};
  std::atomic<c10::CachingDeviceAllocator::CreateContextFn> gather_{nullptr};
  std::atomic<int> record_when_{0};
};

// The process-wide instance (also what c10::GetAllocator(PrivateUse1) returns).
EmuDeviceAllocator* device_allocator();

// What the allocator calls before it raises out of memory, to free memory
// kept for others that no longer need it (IPC's ipc_collect, which registers
// itself: IPC is built on the allocator, not the other way round); it returns
// how many allocations it freed.
void set_release_before_oom(size_t (*release)());

// Whether `ptr` points into emu device memory (any device, any allocation).
bool is_device_ptr(const void* ptr);

} // namespace torch_emu
