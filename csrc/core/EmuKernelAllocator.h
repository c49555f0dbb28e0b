// Memory that kernels and new tensors get. allocate_device is the one entry
// for new device memory outside the caching allocator's own API: it serves
// the CPU allocator inside kernels (EmuKernelAllocator.cpp: a CPU kernel's
// outputs land in device memory) and emu's empty(). A graph sees through it
// the blocks a captured kernel allocates (KernelBlocks), to hand the same
// blocks to the kernel each time it replays.
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>
#include <utility>
#include <vector>

namespace torch_emu {

// LITERALINCLUDE START: ALLOCATE_DEVICE_DECL
// Device memory for a new tensor. During a capture, memory allocated on the
// capturing stream belongs to the graph's private pool: nothing else gets it
// while the graph may still write it. While a captured kernel replays, its
// allocations get the blocks they got when it was captured.
c10::DataPtr allocate_device(size_t nbytes);
// LITERALINCLUDE END: ALLOCATE_DEVICE_DECL

// The blocks one captured kernel allocated in its first run, in order.
struct KernelBlocks {
  std::vector<std::pair<void*, size_t>> blocks;
  c10::DeviceIndex device = -1;
};

// While it lives, allocate_device on this thread records each block into
// `blocks` (kRecord: the kernel's first run, during capture) or hands out the
// recorded ones in order (kReplay: a block of the same size, else new memory).
class KernelBlocksScope {
 public:
  enum Mode { kRecord, kReplay };
  KernelBlocksScope(KernelBlocks& blocks, Mode mode);
  ~KernelBlocksScope();
  KernelBlocksScope(const KernelBlocksScope&) = delete;
  KernelBlocksScope& operator=(const KernelBlocksScope&) = delete;

 private:
  // The scope this one hides, restored at its end.
  KernelBlocks* enclosing_blocks_;
  Mode enclosing_mode_;
  size_t enclosing_next_;
};

// Whether `ptr` is a block allocate_device lent to the kernel replaying on
// this thread (a raw free of it must not free the graph's memory).
bool is_replayed_block(const void* ptr);

} // namespace torch_emu
