#include "core/EmuKernelAllocator.h"

#include <c10/core/CPUAllocator.h>

#include <cstring>
#include <optional>

#include "core/EmuDeviceAllocator.h"
#include "core/EmuKernelContext.h"

namespace torch_emu {
namespace {

struct ActiveBlocks {
  KernelBlocks* blocks = nullptr;
  KernelBlocksScope::Mode mode = KernelBlocksScope::kRecord;
  size_t next = 0; // replay: the next recorded block to hand out
};
thread_local ActiveBlocks tls_blocks;

void keep_block(void* /*ptr*/) {}

// Replay memory: the block the same allocation got when the kernel was
// captured. A replay that allocates differently (a size that does not match)
// gets ordinary memory for that allocation.
std::optional<c10::DataPtr> replayed_block(size_t nbytes) {
  ActiveBlocks& active = tls_blocks;
  const auto& blocks = active.blocks->blocks;
  if (active.next >= blocks.size() || blocks[active.next].second != nbytes) {
    return std::nullopt;
  }
  void* ptr = blocks[active.next++].first;
  // Not owning: the graph's pool holds the block. The context is the pointer
  // itself, as raw_allocate requires; raw frees of it are skipped.
  return c10::DataPtr(ptr, ptr, &keep_block, c10::Device(c10::DeviceType::PrivateUse1, active.blocks->device));
}

c10::DeleterFnPtr cpu_raw_deleter = nullptr;

// Kernels also use raw_allocate/raw_deallocate for scratch space; a raw
// pointer is freed by whichever allocator it came from.
void raw_delete(void* ptr) {
  if (C10_UNLIKELY(is_replayed_block(ptr))) {
    return; // the graph's memory, lent to a replaying kernel
  }
  if (is_device_ptr(ptr)) {
    device_allocator()->raw_deleter()(ptr);
  } else {
    cpu_raw_deleter(ptr);
  }
}

// LITERALINCLUDE START: KERNEL_CPU_ALLOCATOR
// CPU kernels allocate their outputs (and scratch) with the CPU allocator.
// Inside an emu kernel this allocator hands out emu device memory instead, so
// the outputs of a CPU kernel already live on the device and become emu
// tensors without a copy. Outside kernels it is the ordinary CPU allocator.
struct KernelAwareCPUAllocator final : public c10::Allocator {
  explicit KernelAwareCPUAllocator(c10::Allocator* cpu) : cpu_(cpu) {
    cpu_raw_deleter = cpu->raw_deleter();
  }

  c10::DataPtr allocate(size_t nbytes) override {
    if (kernel_device() < 0) {
      return cpu_->allocate(nbytes);
    }
    c10::DataPtr data = allocate_device(nbytes);
    // The kernel sees a CPU tensor; the fallback re-tags it as emu after.
    data.unsafe_set_device(c10::Device(c10::DeviceType::CPU));
    return data;
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &raw_delete;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count); // only ever called from inside kernels
  }

 private:
  c10::Allocator* cpu_;
};

const bool cpu_allocator_installed = [] {
  static KernelAwareCPUAllocator allocator(c10::GetCPUAllocator());
  c10::SetCPUAllocator(&allocator, /*priority=*/100);
  return true;
}();
// LITERALINCLUDE END: KERNEL_CPU_ALLOCATOR

} // namespace

// Scopes nest: a kernel that lends its result's memory (IntoResult in
// EmuKernelFunctions.h) may itself be captured or replayed by a graph.
KernelBlocksScope::KernelBlocksScope(KernelBlocks& blocks, Mode mode)
    : enclosing_blocks_(tls_blocks.blocks), enclosing_mode_(tls_blocks.mode), enclosing_next_(tls_blocks.next) {
  tls_blocks = ActiveBlocks{&blocks, mode, 0};
}

KernelBlocksScope::~KernelBlocksScope() {
  tls_blocks = ActiveBlocks{enclosing_blocks_, enclosing_mode_, enclosing_next_};
}

bool is_replayed_block(const void* ptr) {
  const ActiveBlocks& active = tls_blocks;
  if (active.blocks == nullptr || active.mode != KernelBlocksScope::kReplay) {
    return false;
  }
  for (const auto& [block, nbytes] : active.blocks->blocks) {
    if (block == ptr) {
      return true;
    }
  }
  return false;
}

// LITERALINCLUDE START: ALLOCATE_DEVICE
c10::DataPtr allocate_device(size_t nbytes) {
  ActiveBlocks& active = tls_blocks;
  if (C10_UNLIKELY(active.blocks != nullptr) && active.mode == KernelBlocksScope::kReplay) {
    if (std::optional<c10::DataPtr> block = replayed_block(nbytes)) {
      return std::move(*block);
    }
  }
  // During a capture the allocator serves the capturing stream from the
  // graph's private pool (beginAllocateToPool in capture_begin).
  c10::DataPtr data = device_allocator()->allocate(nbytes);
  if (C10_UNLIKELY(active.blocks != nullptr) && active.mode == KernelBlocksScope::kRecord && data.get() != nullptr) {
    active.blocks->blocks.emplace_back(data.get(), nbytes);
  }
  return data;
}
// LITERALINCLUDE END: ALLOCATE_DEVICE

} // namespace torch_emu
