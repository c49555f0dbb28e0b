// A performance model for the emulated device: copies that take the time a
// bus of a given bandwidth takes, kernels that start a launch latency after
// their turn and run slower than the host runs their code. Set once from
// TORCH_EMU_PROFILE; without it the device is as fast as the host. The model
// only ever adds time (work held on its stream, the stream busy, the caller
// free), so that stream overlap behaves as on a device with those figures.
#pragma once

#include "runtime/emu_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// LITERALINCLUDE START: EMU_RUNTIME_PERF
typedef struct emuPerformanceModel {
  double h2d_bytes_per_second;   // host to device; 0: as fast as the host copies
  double d2h_bytes_per_second;   // device to host
  double d2d_bytes_per_second;   // within one device
  double peer_bytes_per_second;  // between two devices
  double launch_latency_seconds; // a kernel starts this long after its turn on the stream
  double kernel_slowdown;        // a kernel takes this many times its host time (>= 1)
} emuPerformanceModel;

// The model in force (all zeros and a slowdown of 1 without TORCH_EMU_PROFILE).
emuError_t emuGetPerformanceModel(emuPerformanceModel* model);
// LITERALINCLUDE END: EMU_RUNTIME_PERF

#ifdef __cplusplus
} // extern "C"
#endif
