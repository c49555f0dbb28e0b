#include "core/EmuHostAllocator.h"

#include <ATen/core/CachingHostAllocator.h>

#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "core/EmuException.h"
#include "core/EmuStream.h"
#include "runtime/emu_runtime.h"

namespace torch_emu {
namespace {

// An emu runtime event that destroys itself. The host allocator records one on
// every stream a freed pinned block was used on, and reuses the block once all
// of them completed.
class HostEvent {
 public:
  HostEvent() {
    EMU_CHECK(emuEventCreateWithFlags(&event_, emuEventDisableTiming));
  }
  ~HostEvent() {
    if (event_ != nullptr) {
      emuEventDestroy(event_); // never throw from a destructor
    }
  }
  HostEvent(HostEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  HostEvent& operator=(HostEvent&& other) noexcept {
    std::swap(event_, other.event_);
    return *this;
  }
  HostEvent(const HostEvent&) = delete;
  HostEvent& operator=(const HostEvent&) = delete;

  void record(const c10::Stream& stream) {
    EMU_CHECK(emuEventRecord(event_, native_stream(stream)));
  }
  bool query() const {
    const emuError_t status = emuEventQuery(event_);
    if (status == emuErrorNotReady) {
      return false;
    }
    EMU_CHECK(status);
    return true;
  }

 private:
  emuEvent_t event_ = nullptr;
};

// LITERALINCLUDE START: HOST_ALLOCATOR_IMPL
// PyTorch's CachingHostAllocatorImpl does the caching (power-of-two size
// buckets, per-stream events, empty_cache, stats); a backend only supplies the
// runtime calls. c10::Stream serves as the stream type S.
using HostBlock = at::HostBlock<c10::Stream>;

struct EmuHostAllocatorImpl final
    : public at::CachingHostAllocatorImpl<c10::Stream, HostEvent, HostBlock> {
  // Used by Allocator::clone(): pinned memory is ordinary host memory.
  void copy_data(void* dest, const void* src, size_t count) const override {
    std::memcpy(dest, src, count);
  }

 private:
  void allocate_host_memory(size_t size, void** ptr) override {
    EMU_CHECK(emuMallocHost(ptr, size));
  }

  void free_block(HostBlock* block) override {
    EMU_CHECK(emuFreeHost(block->ptr_));
  }

  void record_stream(std::optional<std::vector<HostEvent>>& events, c10::Stream stream) override {
    HostEvent event;
    event.record(stream);
    events->push_back(std::move(event));
  }

  bool query_event(HostEvent& event) override {
    return event.query();
  }

  c10::Stream get_current_stream() const override {
    return current_stream();
  }

  bool stream_is_capturing(c10::Stream stream) const override {
    return false; // emu has no graph capture
  }
};
// LITERALINCLUDE END: HOST_ALLOCATOR_IMPL

// LITERALINCLUDE START: HOST_ALLOCATOR_REGISTER
// Declares EmuHostAllocator (the at::HostAllocator interface around the impl),
// its deleter and its instance; registering it makes it the pinned-memory
// allocator of PrivateUse1 (at::getHostAllocator(at::kPrivateUse1)).
DECLARE_HOST_ALLOCATOR(EmuHostAllocator, EmuHostAllocatorImpl, emu_host_deleter, host_allocator)

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &host_allocator)
// LITERALINCLUDE END: HOST_ALLOCATOR_REGISTER

} // namespace

c10::Allocator* pinned_memory_allocator() {
  return &host_allocator;
}

bool is_pinned_ptr(const void* ptr) {
  if (ptr == nullptr) {
    return false;
  }
  emuPointerAttributes attributes{};
  // A pointer the runtime cannot classify (or a runtime that cannot start,
  // e.g. after fork) is simply not pinned.
  return emuPointerGetAttributes(&attributes, ptr) == emuSuccess &&
         attributes.type == emuMemoryTypeHost;
}

} // namespace torch_emu
