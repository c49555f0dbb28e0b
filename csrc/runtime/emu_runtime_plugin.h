// Plugging in another runtime.
//
// Every call of emu_runtime.h that reaches the device goes through one table
// of function pointers (plugin.cpp). By default it holds the native
// runtime of csrc/runtime; emuRuntimeInstall replaces it, once, before the
// first call, with another implementation of the same calls: the Python
// runtime bridge (csrc/python/RuntimeBindings.cpp) installs one that forwards
// to a Python object. The integration core is the same whichever runtime runs.
//
// The extension headers (graphs, IPC, faults, the performance model, traces,
// utilization) belong to the native runtime: with another runtime installed
// their calls fail with emuErrorNotSupported. Device attributes and UUIDs are
// derived from the host and work with any runtime.
#pragma once

#include "runtime/emu_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// LITERALINCLUDE START: RUNTIME_CALLS
// The calls a runtime implements: X(name, parameters, arguments). Each returns
// emuError_t and has the semantics documented in emu_runtime.h.
#define EMU_RUNTIME_CALLS(X)                                                                  \
  X(emuGetDeviceCount, (int* count), (count))                                                 \
  X(emuGetDevice, (int* device), (device))                                                    \
  X(emuSetDevice, (int device), (device))                                                     \
  X(emuGetDeviceProperties, (emuDeviceProp* prop, int device), (prop, device))                \
  X(emuDeviceSynchronize, (int device), (device))                                             \
  X(emuMemGetInfo, (int device, size_t* free_bytes, size_t* total_bytes),                     \
    (device, free_bytes, total_bytes))                                                        \
  X(emuMalloc, (void** ptr, size_t size), (ptr, size))                                        \
  X(emuFree, (void* ptr), (ptr))                                                              \
  X(emuMallocHost, (void** ptr, size_t size), (ptr, size))                                    \
  X(emuFreeHost, (void* ptr), (ptr))                                                          \
  X(emuPointerGetAttributes, (emuPointerAttributes* attr, const void* ptr), (attr, ptr))      \
  X(emuDeviceGetStreamPriorityRange, (int* least, int* greatest), (least, greatest))          \
  X(emuStreamCreateWithPriority, (emuStream_t* stream, int priority), (stream, priority))     \
  X(emuStreamDestroy, (emuStream_t stream), (stream))                                         \
  X(emuStreamGetDevice, (emuStream_t stream, int* device), (stream, device))                  \
  X(emuStreamGetPriority, (emuStream_t stream, int* priority), (stream, priority))            \
  X(emuStreamQuery, (emuStream_t stream), (stream))                                           \
  X(emuStreamGetPendingWork, (emuStream_t stream, int* pending), (stream, pending))           \
  X(emuStreamSynchronize, (emuStream_t stream), (stream))                                     \
  X(emuStreamWaitEvent, (emuStream_t stream, emuEvent_t event), (stream, event))              \
  X(emuMemcpy, (void* dst, const void* src, size_t n, emuMemcpyKind kind), (dst, src, n, kind)) \
  X(emuMemcpyAsync, (void* dst, const void* src, size_t n, emuMemcpyKind kind, emuStream_t stream), \
    (dst, src, n, kind, stream))                                                              \
  X(emuLaunchHostFunc, (emuStream_t stream, emuHostFn_t fn, void* user_data), (stream, fn, user_data)) \
  X(emuLaunchHostFuncAsync, (emuStream_t stream, emuHostFn_t fn, void* user_data),            \
    (stream, fn, user_data))                                                                  \
  X(emuLaunchKernel, (emuStream_t stream, emuKernelFn_t fn, void* user_data), (stream, fn, user_data)) \
  X(emuLaunchKernelAsync, (emuStream_t stream, emuKernelFn_t fn, void* user_data),            \
    (stream, fn, user_data))                                                                  \
  X(emuKernelSetErrorMessage, (const char* message), (message))                               \
  X(emuEventCreateWithFlags, (emuEvent_t* event, unsigned int flags), (event, flags))         \
  X(emuEventDestroy, (emuEvent_t event), (event))                                             \
  X(emuEventRecord, (emuEvent_t event, emuStream_t stream), (event, stream))                  \
  X(emuEventQuery, (emuEvent_t event), (event))                                               \
  X(emuEventSynchronize, (emuEvent_t event), (event))                                         \
  X(emuEventElapsedTime, (float* ms, emuEvent_t start, emuEvent_t end), (ms, start, end))

typedef struct emuRuntimeTable {
  const char* name; // e.g. "native", "python": said in errors and by emuRuntimeName
#define EMU_RUNTIME_TABLE_ENTRY(name, params, args) emuError_t(*name) params;
  EMU_RUNTIME_CALLS(EMU_RUNTIME_TABLE_ENTRY)
#undef EMU_RUNTIME_TABLE_ENTRY
} emuRuntimeTable;
// LITERALINCLUDE END: RUNTIME_CALLS

// Makes `table` (every entry set; it must outlive the process) the runtime.
// Fails with emuErrorInitializationError once any call has reached the
// native runtime or another runtime was installed: devices, memory and
// streams cannot change hands.
emuError_t emuRuntimeInstall(const emuRuntimeTable* table);
// The installed runtime's name.
const char* emuRuntimeName(void);
// For an installed runtime: sets this thread's emuGetLastErrorMessage.
void emuRuntimeSetErrorMessage(const char* message);
// For an installed runtime: emuErrorInvalidDevice with the message every
// runtime gives (naming `call`) unless 0 <= device < emuGetDeviceCount().
emuError_t emuRuntimeCheckDevice(const char* call, int device);

#ifdef __cplusplus
} // extern "C"
#endif
