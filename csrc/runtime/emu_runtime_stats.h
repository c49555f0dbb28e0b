// Device activity as the runtime measures it: what nvidia-smi reports as
// "utilization" for a GPU, for the emulated device (torch.emu.utilization and
// torch.emu.memory_usage). Same C style as emu_runtime.h.
#pragma once

#include "runtime/emu_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// LITERALINCLUDE START: EMU_RUNTIME_STATS
// Percentages (0..100) of the last sampling period (about one second) during
// which, on `device`:
// - kernel: at least one launched kernel was running (on any stream, on a
//   worker or inline);
// - memory: device memory was being read or written, i.e. a kernel was
//   running or a copy touching the device's memory was in progress.
typedef struct emuUtilization {
  unsigned int kernel;
  unsigned int memory;
} emuUtilization;

emuError_t emuDeviceGetUtilizationRates(int device, emuUtilization* utilization);
// Length of the sampling period, in milliseconds.
unsigned int emuUtilizationSamplePeriodMs(void);
// LITERALINCLUDE END: EMU_RUNTIME_STATS

#ifdef __cplusplus
} // extern "C"
#endif
