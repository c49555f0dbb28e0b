// The emulated device's driver API: device memory shared between processes.
//
// Shaped like CUDA's IPC calls (cudaIpcGetMemHandle, cudaIpcOpenMemHandle,
// cudaIpcCloseMemHandle). A handle is 64 plain bytes that any transport can
// carry; the receiving process maps the same device memory, so writes are
// visible both ways once the writer's work has completed (synchronise).
//
// Semantics worth knowing:
// - A handle names one whole emuMalloc allocation. emuMemGetAddressRange
//   finds the allocation an interior pointer belongs to, as cuMemGetAddressRange.
// - The receiver maps the memory into its own device arena, at an address of
//   its choosing, so it is device memory there too (pointer attributes,
//   memcpy kinds, strict mode). The range counts as used in the receiver's
//   emuMemGetInfo until it is closed.
// - Opening needs the sender to be alive, running as the same user (the
//   receiver opens the sender's arena through /proc/<pid>/fd). Once open, the
//   mapping keeps the memory alive even if the sender exits.
// - Opening the same handle again in a process returns the same pointer and
//   counts; each open needs its own close.
// - The runtime does not keep the sender's allocation alive: freeing it while a
//   receiver has it open leaves the receiver reading zeros or a later
//   allocation's data, as on CUDA. Reference counting is the caller's job.
#pragma once

#include "runtime/emu_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// LITERALINCLUDE START: EMU_RUNTIME_IPC
typedef struct emuIpcMemHandle_t {
  char reserved[64];
} emuIpcMemHandle_t;

// The allocation (from emuMalloc) containing `ptr`: its start and size.
emuError_t emuMemGetAddressRange(void** base, size_t* size, const void* ptr);
// A handle for the allocation starting at `devptr` (in this process).
emuError_t emuIpcGetMemHandle(emuIpcMemHandle_t* handle, void* devptr);
// Maps the allocation `handle` names into this process, on the device it was
// allocated on. `flags` is 0 or emuIpcMemLazyEnablePeerAccess (accepted for
// CUDA parity, no effect: every emu device can access every other).
enum { emuIpcMemLazyEnablePeerAccess = 1 };
emuError_t emuIpcOpenMemHandle(void** devptr, emuIpcMemHandle_t handle, unsigned int flags);
// Undoes one emuIpcOpenMemHandle; the last one unmaps the memory.
emuError_t emuIpcCloseMemHandle(void* devptr);
// LITERALINCLUDE END: EMU_RUNTIME_IPC

#ifdef __cplusplus
} // extern "C"
#endif
