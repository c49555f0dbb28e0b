// Device attributes beyond emuDeviceProp, queried one at a time as with
// cudaDeviceGetAttribute (torch.emu.get_device_properties reads them). Same C
// style as emu_runtime.h.
#pragma once

#include "runtime/emu_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// LITERALINCLUDE START: EMU_RUNTIME_ATTRIBUTES
typedef enum emuDeviceAttr {
  emuDevAttrIntegrated = 0,            // 1: device memory is host memory
  emuDevAttrMultiGpuBoard = 1,         // 0: each device stands alone
  emuDevAttrMaxThreadsPerMultiProcessor = 2,  // 1: a multiprocessor is one host thread
  emuDevAttrWarpSize = 3,              // 1: a kernel's thread runs scalar/SIMD host code
  emuDevAttrL2CacheSize = 4,           // bytes: the host's L2 cache (0 if the host does not say)
  emuDevAttrClockRate = 5,             // kHz: the host CPU's maximum clock (0 if the host does not say)
  emuDevAttrMemoryClockRate = 6,       // kHz: 0, no memory clock of its own (host memory)
  emuDevAttrGlobalMemoryBusWidth = 7,  // bits: 0, no memory bus of its own (host memory)
  emuDevAttrSharedMemoryPerBlock = 8,  // bytes: 0, no on-chip shared memory
  emuDevAttrSharedMemoryPerMultiprocessor = 9,  // bytes: 0, as above
} emuDeviceAttr;

emuError_t emuDeviceGetAttribute(int* value, emuDeviceAttr attr, int device);
// 16 bytes identifying the device: stable for a host and device index.
emuError_t emuDeviceGetUuid(unsigned char uuid[16], int device);
// LITERALINCLUDE END: EMU_RUNTIME_ATTRIBUTES

#ifdef __cplusplus
} // extern "C"
#endif
