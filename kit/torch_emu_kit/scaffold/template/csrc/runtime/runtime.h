// The tpldev "driver": the C API a real accelerator's runtime library would
// offer (devices, memory, copies, synchronization). Here the devices are
// slices of host memory with a fixed capacity each, so that everything above
// this file is the code a vendor writes for real hardware.
// Guide: torch-emu docs/guide/runtime.md
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// LITERALINCLUDE START: RUNTIME_API
typedef enum {
  tpldevSuccess = 0,
  tpldevErrorInvalidDevice,
  tpldevErrorOutOfMemory,
  tpldevErrorInvalidValue,
} tpldevError;

// Devices: TPLDEV_DEVICE_COUNT (default 2). The current device is per thread.
int tpldevDeviceCount(void);
tpldevError tpldevGetDevice(int* device);
tpldevError tpldevSetDevice(int device);
tpldevError tpldevDeviceSynchronize(int device);

// Memory on the current device; each device holds TPLDEV_DEVICE_MEMORY bytes
// (default 1 GiB, suffixes K, M, G accepted) and refuses more.
tpldevError tpldevMalloc(void** ptr, size_t bytes);
tpldevError tpldevFree(void* ptr);
tpldevError tpldevMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes);
tpldevError tpldevPointerGetDevice(const void* ptr, int* device);

// Copies between any two of host and device memory; they complete before
// the call returns (this device has no streams).
tpldevError tpldevMemcpy(void* dst, const void* src, size_t bytes);

const char* tpldevGetErrorString(tpldevError error);
// LITERALINCLUDE END: RUNTIME_API

#ifdef __cplusplus
}
#endif
