// The emulated device's driver API.
//
// This is the only way the integration core (csrc/core, csrc/aten) reaches the
// "hardware". It is deliberately shaped like a small GPU driver API: devices,
// device memory, pinned host memory, memcpy kinds, streams, events and work
// launched onto streams. Everything returns an emuError_t; a failing call also
// leaves a detailed, human-readable message for the calling thread in
// emuGetLastErrorMessage().
//
// Semantics worth knowing (they mirror CUDA where a vendor would expect it):
// - The current device is per host thread (emuSetDevice/emuGetDevice).
// - Device memory lives in one mapping per device, sized by the device's
//   capacity, of a memory file other processes can map (emu_runtime_ipc.h).
//   Asking for more than is free fails with emuErrorMemoryAllocation.
// - Streams execute their work in order on a worker thread of their own.
//   Streams never synchronise implicitly with each other (every stream is
//   "non-blocking" in CUDA terms); order across streams is made with events.
// - Lower priority numbers mean higher priority, as in CUDA.
// - Async copies that touch pageable host memory complete before the call
//   returns (as CUDA's do); copies between device memory and pinned host
//   memory from emuMallocHost are truly asynchronous.
// - Work launched with emuLaunchKernel runs with device memory accessible,
//   in stream order. When the stream has nothing queued the runtime may run it
//   on the calling thread before returning.
// - After fork() in a process that initialised the runtime, every call in the
//   child fails with emuErrorInitializationError: the stream workers do not
//   survive fork, exactly like a real driver's context.
//
// The runtime's files follow one naming rule (tests/test_runtime_native.py
// checks it): a topic header emu_runtime_X.h is implemented by X.cpp
// (emu_runtime_ipc.h by ipc.cpp, emu_runtime_graphs.h by graphs.cpp...;
// emu_runtime_env.h and emu_runtime_tls.h are inline only). This header, the
// core API, is implemented by runtime.cpp (errors, configuration, devices) and
// by one file per concern it declares, none with a header of its own:
// memory.cpp, streams.cpp, events.cpp, copies.cpp and launches.cpp. Headers named *_internal.h are
// private to the runtime.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// LITERALINCLUDE START: EMU_RUNTIME_ERRORS
typedef enum emuError_t {
  emuSuccess = 0,
  emuErrorInvalidValue = 1,          // a bad argument (null pointer, bad size...)
  emuErrorMemoryAllocation = 2,      // device or host out of memory
  emuErrorInitializationError = 3,   // runtime unusable (e.g. child after fork)
  emuErrorInvalidDevice = 4,         // device index out of range
  emuErrorInvalidDevicePointer = 5,  // pointer is not device memory of the runtime
  emuErrorInvalidResourceHandle = 6, // bad stream or event handle
  emuErrorNotReady = 7,              // query: work still pending (not a failure)
  emuErrorLaunchFailure = 8,         // a launched function reported failure
  emuErrorStreamCaptureUnsupported = 9,  // not allowed while a stream captures (emu_runtime_graphs.h)
  emuErrorStreamCaptureInvalidated = 10, // the capture was invalidated by such a call
  emuErrorDeviceLost = 11,           // the device is gone: every later call fails (emu_runtime_faults.h)
  emuErrorEccUncorrectable = 12,     // a copy hit an uncorrectable memory error (emu_runtime_faults.h)
  emuErrorNotSupported = 13,         // the installed runtime does not provide this call (emu_runtime_plugin.h)
  emuErrorUnknown = 14,              // the runtime failed in a way it could not classify
} emuError_t;

const char* emuGetErrorName(emuError_t error);
const char* emuGetErrorString(emuError_t error);
// Detail of the last failing call made by this thread ("" if none), e.g.
// "emuMalloc: out of memory on emu:0: tried to allocate 4.00 GiB with 1.50 GiB
// free of 8.00 GiB capacity". Successful calls leave it unchanged.
const char* emuGetLastErrorMessage(void);
// LITERALINCLUDE END: EMU_RUNTIME_ERRORS

// LITERALINCLUDE START: EMU_RUNTIME_DEVICE
// Devices. Count and capacity come from TORCH_EMU_DEVICE_COUNT and
// TORCH_EMU_DEVICE_MEMORY (read once, at first use).
typedef struct emuDeviceProp {
  char name[64];
  size_t totalGlobalMem;
  int major;
  int minor;
  int multiProcessorCount; // host threads a kernel may use
} emuDeviceProp;

emuError_t emuGetDeviceCount(int* count);
emuError_t emuGetDevice(int* device);
emuError_t emuSetDevice(int device);
emuError_t emuGetDeviceProperties(emuDeviceProp* prop, int device);
// Waits for every stream of `device` (not the current one) to drain.
emuError_t emuDeviceSynchronize(int device);
emuError_t emuMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes);
// 1 when TORCH_EMU_STRICT is on: device memory faults on host access outside
// of launched work.
int emuStrictMode(void);
// LITERALINCLUDE END: EMU_RUNTIME_DEVICE

// LITERALINCLUDE START: EMU_RUNTIME_MEMORY
// Device memory on the current device, and pinned host memory.
emuError_t emuMalloc(void** ptr, size_t size);
emuError_t emuFree(void* ptr);
emuError_t emuMallocHost(void** ptr, size_t size);
emuError_t emuFreeHost(void* ptr);

typedef enum emuMemoryType {
  emuMemoryTypeUnregistered = 0, // ordinary (pageable) host memory
  emuMemoryTypeHost = 1,         // pinned host memory from emuMallocHost
  emuMemoryTypeDevice = 2,
} emuMemoryType;

typedef struct emuPointerAttributes {
  emuMemoryType type;
  int device; // device index for device memory, -1 otherwise
} emuPointerAttributes;

// Works for any pointer, including interior pointers of an allocation.
emuError_t emuPointerGetAttributes(emuPointerAttributes* attr, const void* ptr);

typedef enum emuMemcpyKind {
  emuMemcpyHostToHost = 0,
  emuMemcpyHostToDevice = 1,
  emuMemcpyDeviceToHost = 2,
  emuMemcpyDeviceToDevice = 3, // also between two devices (peer)
} emuMemcpyKind;
// LITERALINCLUDE END: EMU_RUNTIME_MEMORY

// LITERALINCLUDE START: EMU_RUNTIME_STREAMS
typedef struct emuStream* emuStream_t;
typedef struct emuEvent* emuEvent_t;
typedef void (*emuHostFn_t)(void* user_data);

// Priorities run from `least` (0, the default) to `greatest` (-1).
emuError_t emuDeviceGetStreamPriorityRange(int* least, int* greatest);
// Creates a stream on the current device.
emuError_t emuStreamCreateWithPriority(emuStream_t* stream, int priority);
emuError_t emuStreamDestroy(emuStream_t stream); // drains it first
// Accepts any value: one that is not a live stream is emuErrorInvalidResourceHandle.
emuError_t emuStreamGetDevice(emuStream_t stream, int* device);
emuError_t emuStreamGetPriority(emuStream_t stream, int* priority);
emuError_t emuStreamQuery(emuStream_t stream); // emuSuccess or emuErrorNotReady
// Whether work is queued or running on the stream (*pending = 1) or not (0);
// unlike emuStreamQuery it reports no failure.
emuError_t emuStreamGetPendingWork(emuStream_t stream, int* pending);
emuError_t emuStreamSynchronize(emuStream_t stream);
// Later work on `stream` waits until the work `event` captured at its most
// recent record has completed. An event never recorded is a no-op.
emuError_t emuStreamWaitEvent(emuStream_t stream, emuEvent_t event);

// Copies. The synchronous form first waits for all streams of the devices
// involved, then copies; the async form is ordered on `stream`.
emuError_t emuMemcpy(void* dst, const void* src, size_t n, emuMemcpyKind kind);
emuError_t emuMemcpyAsync(void* dst, const void* src, size_t n,
                          emuMemcpyKind kind, emuStream_t stream);

// Host work on a stream that does not touch device memory (callbacks).
emuError_t emuLaunchHostFunc(emuStream_t stream, emuHostFn_t fn, void* user_data);
// The same, always on the stream's worker: the call returns at once.
emuError_t emuLaunchHostFuncAsync(emuStream_t stream, emuHostFn_t fn, void* user_data);
// A kernel: `fn` runs in stream order with device memory accessible (also in
// strict mode). If `fn` returns non-zero the launch failed: when it ran on the
// calling thread emuLaunchKernel returns emuErrorLaunchFailure; when it ran on
// the stream's worker, the next emuStreamSynchronize/emuStreamQuery of that
// stream (or emuDeviceSynchronize of its device) returns emuErrorLaunchFailure
// once. Failures are not sticky: the stream stays usable.
// Synchronising from inside a launched function never deadlocks: it waits
// only for the work queued before that function.
typedef int (*emuKernelFn_t)(void* user_data);
emuError_t emuLaunchKernel(emuStream_t stream, emuKernelFn_t fn, void* user_data);
// The same, but never on the calling thread: `fn` is queued for the stream's
// worker and the call returns at once (a GPU's kernel launch). Only work
// launched from work running on `stream` runs in place, as part of it. A
// failure is reported by the next emuStreamSynchronize, emuStreamQuery or
// emuDeviceSynchronize that covers the stream, once.
emuError_t emuLaunchKernelAsync(emuStream_t stream, emuKernelFn_t fn, void* user_data);
// Called by a kernel before it returns non-zero: `message` (copied) becomes
// the detail of the error that reports the failure, so that it can say what
// failed and why.
emuError_t emuKernelSetErrorMessage(const char* message);

// Events. Flags: emuEventDefault records a timestamp; emuEventDisableTiming
// does not (elapsed time on it fails with emuErrorInvalidResourceHandle).
enum { emuEventDefault = 0, emuEventDisableTiming = 2 };
emuError_t emuEventCreateWithFlags(emuEvent_t* event, unsigned int flags);
emuError_t emuEventDestroy(emuEvent_t event);
emuError_t emuEventRecord(emuEvent_t event, emuStream_t stream);
emuError_t emuEventQuery(emuEvent_t event); // emuSuccess or emuErrorNotReady
emuError_t emuEventSynchronize(emuEvent_t event);
// Milliseconds between two completed, timed records on one device (records on
// two devices: emuErrorInvalidResourceHandle, as CUDA).
emuError_t emuEventElapsedTime(float* ms, emuEvent_t start, emuEvent_t end);
// LITERALINCLUDE END: EMU_RUNTIME_STREAMS

#ifdef __cplusplus
} // extern "C"
#endif
