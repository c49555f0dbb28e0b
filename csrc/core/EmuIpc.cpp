#include "core/EmuIpc.h"

#include <ATen/StorageUtils.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/EmuDeviceAllocator.h"
#include "core/EmuException.h"
#include "core/EmuStorageImpl.h"
#include "runtime/emu_runtime_ipc.h"

namespace torch_emu {
namespace {

// ---- reference counts in CPU shared memory ----

constexpr size_t kSlotsPerPage = 1024;

int64_t* slot_address(const c10::Storage& page, size_t slot) {
  TORCH_CHECK(page.device_type() == c10::DeviceType::CPU && (slot + 1) * sizeof(int64_t) <= page.nbytes(),
              "emu IPC: invalid reference counter (slot ", slot, " of a ", page.nbytes(), "-byte ",
              page.device(), " storage)");
  return static_cast<int64_t*>(page.unsafeGetStorageImpl()->mutable_data()) + slot;
}

struct CounterSlot {
  c10::Storage page;
  size_t slot = 0;

  int64_t* count() const {
    return slot_address(page, slot);
  }
};

// Slots are handed out per sent storage and come back when its memory is freed.
struct CounterPool {
  std::mutex mutex;
  std::vector<CounterSlot> free;

  CounterSlot acquire() {
    std::lock_guard<std::mutex> guard(mutex);
    if (free.empty()) {
      c10::Storage page(at::new_shm_fd_storage(kSlotsPerPage * sizeof(int64_t)));
      for (size_t i = kSlotsPerPage; i-- > 0;) {
        free.push_back({page, i});
      }
    }
    CounterSlot slot = std::move(free.back());
    free.pop_back();
    *slot.count() = 0;
    return slot;
  }

  void release(CounterSlot slot) {
    std::lock_guard<std::mutex> guard(mutex);
    free.push_back(std::move(slot));
  }
};
CounterPool& counter_pool() {
  static auto* const pool = new CounterPool;  // leaked: storages may die at exit
  return *pool;
}

// ---- sender side ----

// LITERALINCLUDE START: IPC_SENT_DATA
// Replaces the DataPtr of a storage once it has been sent: it owns the
// caching allocator's DataPtr, so the block is not reused while receivers
// hold it even after the sender's storage died.
struct SentData {
  c10::DataPtr original;
  CounterSlot counter;

  ~SentData() {
    counter_pool().release(std::move(counter));
  }
  bool in_use() const {
    return __atomic_load_n(counter.count(), __ATOMIC_ACQUIRE) > 0;
  }
};

struct Limbo {
  std::mutex mutex;
  std::vector<std::unique_ptr<SentData>> waiting;  // dead storages, still held by receivers
};
Limbo& limbo() {
  static auto* const all = new Limbo;
  return *all;
}

void sent_data_deleter(void* ctx) {
  std::unique_ptr<SentData> data(static_cast<SentData*>(ctx));
  if (data->in_use()) {
    std::lock_guard<std::mutex> guard(limbo().mutex);
    limbo().waiting.push_back(std::move(data));
  }  // else the original DataPtr frees the block now
}
// LITERALINCLUDE END: IPC_SENT_DATA

// ---- receiver side ----

struct ReceivedData {
  IpcShare share;  // what it was opened from, to forward it to a third process
  c10::DeviceIndex device;
  void* mapping;   // what emuIpcOpenMemHandle returned
  bool released = false;  // reference given back already (at exit)
};

struct Received {
  std::mutex mutex;
  std::unordered_set<ReceivedData*> alive;
};
Received& received() {
  static auto* const all = new Received;
  return *all;
}

// Work still queued on the device may write the memory: finish it before the
// sender may reuse it.
void give_back(ReceivedData& data) {
  EMU_CHECK(emuDeviceSynchronize(data.device));
  __atomic_fetch_sub(slot_address(data.share.ref_counter, data.share.ref_counter_slot), 1, __ATOMIC_ACQ_REL);
  data.released = true;
}

void received_data_deleter(void* ctx) {
  std::unique_ptr<ReceivedData> data(static_cast<ReceivedData*>(ctx));
  // Runs in destructors: report, never throw.
  try {
    {
      std::lock_guard<std::mutex> guard(received().mutex);
      received().alive.erase(data.get());
      if (!data->released) give_back(*data);
    }
    EMU_CHECK(emuIpcCloseMemHandle(data->mapping));
  } catch (const std::exception& e) {
    TORCH_WARN("emu IPC: could not release a shared storage: ", e.what());
  }
}

} // namespace

// LITERALINCLUDE START: IPC_SHARE_STORAGE
IpcShare share_storage(const c10::Storage& storage) {
  TORCH_CHECK(storage.device_type() == c10::DeviceType::PrivateUse1,
              "emu IPC: expected an emu storage, got one on ", storage.device());
  TORCH_CHECK(storage.nbytes() > 0, "emu IPC: a storage of zero bytes has no memory to share");
  // Two threads sending one storage (two queues' feeder threads) must not both wrap it.
  static std::mutex share_mutex;
  std::lock_guard<std::mutex> guard(share_mutex);
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  c10::DataPtr& data_ptr = impl->mutable_data_ptr();  // materialises a copy-on-write storage
  const c10::DeviceIndex device = data_ptr.device().index();

  if (data_ptr.get_deleter() == &received_data_deleter) {
    // Received from another process: forward the original memory.
    const auto* received = static_cast<const ReceivedData*>(data_ptr.get_context());
    EMU_CHECK(emuDeviceSynchronize(device));
    __atomic_fetch_add(slot_address(received->share.ref_counter, received->share.ref_counter_slot), 1,
                       __ATOMIC_ACQ_REL);
    return received->share;
  }
  if (data_ptr.get_deleter() != &sent_data_deleter) {
    TORCH_CHECK(data_ptr.get_deleter() == device_allocator()->raw_deleter(),
                "emu IPC: cannot share this emu storage: its memory was not allocated by torch-emu's "
                "device allocator (a storage made with from_blob over emu memory?), so nothing can "
                "keep it alive for the receiver");
    // First time this storage is sent: the storage now owns its memory through a
    // SentData. The data pointer stays the same, so tensors over it see nothing.
    auto* sent = new SentData{c10::DataPtr(), counter_pool().acquire()};
    void* data = data_ptr.get();
    sent->original = impl->set_data_ptr(c10::DataPtr(data, sent, &sent_data_deleter, data_ptr.device()));
  }
  const auto* sent = static_cast<const SentData*>(impl->data_ptr().get_context());

  void* base = nullptr;
  size_t base_size = 0;
  EMU_CHECK(emuMemGetAddressRange(&base, &base_size, impl->data_ptr().get()));
  emuIpcMemHandle_t handle;
  EMU_CHECK(emuIpcGetMemHandle(&handle, base));
  EMU_CHECK(emuDeviceSynchronize(device));
  __atomic_fetch_add(sent->counter.count(), 1, __ATOMIC_ACQ_REL);
  ipc_collect();

  IpcShare share;
  share.handle.assign(handle.reserved, sizeof(handle.reserved));
  share.storage_offset = static_cast<size_t>(static_cast<char*>(impl->data_ptr().get()) -
                                             static_cast<char*>(base));
  share.storage_size = storage.nbytes();
  share.ref_counter = sent->counter.page;
  share.ref_counter_slot = sent->counter.slot;
  return share;
}
// LITERALINCLUDE END: IPC_SHARE_STORAGE

// LITERALINCLUDE START: IPC_OPEN_STORAGE
c10::Storage open_shared_storage(const IpcShare& share) {
  emuIpcMemHandle_t handle;
  TORCH_CHECK(share.handle.size() == sizeof(handle.reserved), "emu IPC: a handle has ",
              sizeof(handle.reserved), " bytes, got ", share.handle.size());
  slot_address(share.ref_counter, share.ref_counter_slot);  // checks it
  share.handle.copy(handle.reserved, sizeof(handle.reserved));
  void* mapping = nullptr;
  EMU_CHECK(emuIpcOpenMemHandle(&mapping, handle, emuIpcMemLazyEnablePeerAccess));
  emuPointerAttributes attr{};
  EMU_CHECK(emuPointerGetAttributes(&attr, mapping));
  const auto device = static_cast<c10::DeviceIndex>(attr.device);
  auto* data = new ReceivedData{share, device, mapping};
  {
    std::lock_guard<std::mutex> guard(received().mutex);
    received().alive.insert(data);
  }
  c10::DataPtr data_ptr(static_cast<char*>(mapping) + share.storage_offset, data, &received_data_deleter,
                        c10::Device(c10::DeviceType::PrivateUse1, device));
  // Not resizable: a resize would hand out memory the sender does not see.
  return c10::Storage(c10::make_intrusive<EmuStorageImpl>(c10::StorageImpl::use_byte_size_t(),
                                                          share.storage_size, std::move(data_ptr),
                                                          device_allocator(), /*resizable=*/false));
}
// LITERALINCLUDE END: IPC_OPEN_STORAGE

void release_ref_counter(const c10::Storage& ref_counter, size_t slot) {
  __atomic_fetch_sub(slot_address(ref_counter, slot), 1, __ATOMIC_ACQ_REL);
}

// LITERALINCLUDE START: IPC_COLLECT
size_t ipc_collect() {
  std::vector<std::unique_ptr<SentData>> done;
  {
    std::lock_guard<std::mutex> guard(limbo().mutex);
    auto& waiting = limbo().waiting;
    for (size_t i = 0; i < waiting.size();) {
      if (waiting[i]->in_use()) {
        ++i;
        continue;
      }
      done.push_back(std::move(waiting[i]));
      waiting[i] = std::move(waiting.back());
      waiting.pop_back();
    }
  }
  return done.size();  // freed here, outside the lock: the allocator takes its own
}
// LITERALINCLUDE END: IPC_COLLECT

// Before it raises out of memory, the allocator collects what was kept only
// for other processes that have since let go, as CUDA's does.
const bool collect_before_oom = (set_release_before_oom(&ipc_collect), true);

void release_received_storages() {
  std::lock_guard<std::mutex> guard(received().mutex);
  for (ReceivedData* data : received().alive) {
    if (!data->released) give_back(*data);
  }
}

} // namespace torch_emu
