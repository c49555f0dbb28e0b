// Faults injected on purpose, so that error handling can be tested without
// hardware that fails: the device runs out of memory, a kernel or a copy
// fails, the device is lost. A fault matches calls of one kind (on one device
// or any); it lets `after` matching calls succeed, then makes `times` of them
// fail (0: every one from then on). Each failure is the error real hardware
// would give, through the same paths, so the layers above handle it as they
// would handle the real one.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "runtime/emu_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// LITERALINCLUDE START: EMU_RUNTIME_FAULTS
typedef enum emuFaultKind {
  // emuMalloc fails with emuErrorMemoryAllocation. With `reserved_limit`, only
  // the calls that would take the device's allocated memory above it match
  // (a smaller device).
  emuFaultOutOfMemory = 0,
  // A kernel launch fails with emuErrorLaunchFailure. The kernel runs (its
  // results are undefined, as on hardware); the failure is reported where its
  // completion is observed: by the launch when it ran there, else by the next
  // synchronisation of its stream (an asynchronous error).
  emuFaultKernel = 1,
  // emuMemcpy/emuMemcpyAsync fails with emuErrorEccUncorrectable, copying nothing.
  emuFaultCopy = 2,
  // At a kernel launch the device is lost: that launch and every later call
  // fail with emuErrorDeviceLost (except the calls that release resources,
  // freeing memory, destroying streams and events, and the calls below), for
  // every device of the process, as when a driver loses its context.
  emuFaultDeviceLost = 3,
} emuFaultKind;

typedef struct emuFaultSpec {
  emuFaultKind kind;
  int device;              // the device whose calls match; -1: every device
  uint64_t after;          // matching calls that succeed first
  uint64_t times;          // matching calls that then fail; 0: all of them
  size_t reserved_limit;   // emuFaultOutOfMemory: see above; 0: every emuMalloc matches
  const char* kernel_name; // emuFaultKernel: only launches whose name contains this
                           // (emuFaultSetLaunchName; copied); NULL: every launch
} emuFaultSpec;

// Arms a fault; `*id` names it for the calls below.
emuError_t emuFaultInject(const emuFaultSpec* spec, int* id);
// Disarms one fault, or every fault with id -1. A lost device stays lost.
emuError_t emuFaultRemove(int id);
// How many calls the fault made fail so far.
emuError_t emuFaultGetHits(int id, uint64_t* hits);
// Whether any fault is armed: a launcher that names its launches asks first,
// so that naming costs nothing otherwise.
int emuFaultsArmed(void);
// Names the kernels the calling thread launches from now on (NULL: unnamed),
// for faults with a kernel_name. `name` must outlive those launches. A kernel
// captured into a graph keeps its name (copied) for its replays.
emuError_t emuFaultSetLaunchName(const char* name);
// LITERALINCLUDE END: EMU_RUNTIME_FAULTS

#ifdef __cplusplus
} // extern "C"
#endif
