// Pinned (page-locked) host memory for emu: what tensor.pin_memory() and
// torch.empty(..., pin_memory=True) return when emu is the accelerator. Copies
// between it and device memory are truly asynchronous (see emu_runtime.h).
#pragma once

#include <c10/core/Allocator.h>

namespace torch_emu {

// The caching pinned-memory allocator (for the hooks' getPinnedMemoryAllocator).
c10::Allocator* pinned_memory_allocator();

// True if `ptr` points into memory from emuMallocHost (interior pointers too).
bool is_pinned_ptr(const void* ptr);

} // namespace torch_emu
