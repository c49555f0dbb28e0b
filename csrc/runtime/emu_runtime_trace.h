// Activity tracing: the runtime's record of the device work it executes.
//
// Shaped like a GPU vendor's activity API (CUPTI, roctracer): a profiler
// enables tracing, the runtime appends one record per kernel and memcpy it
// executes (device, stream, device start/end) together with the host call that
// submitted it, and the profiler drains the completed records when it wants
// them. Two thread-local stacks let the layers above annotate launches without
// passing anything through the launch API: an external correlation id (the
// framework op that launches) and a name (the op or generated kernel).
//
// Cost: with tracing off, submitting work reads one relaxed atomic flag.
//
// Timestamps are nanoseconds of CLOCK_REALTIME (Unix time), the clock
// PyTorch's profiler stamps its CPU ops with, so both line up in one timeline.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "runtime/emu_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// LITERALINCLUDE START: EMU_RUNTIME_TRACE
typedef enum emuActivityKind {
  emuActivityKindKernel = 0, // emuLaunchKernel
  emuActivityKindMemcpy = 1, // emuMemcpyAsync, emuMemcpy
} emuActivityKind;

typedef struct emuActivityRecord {
  emuActivityKind kind;
  const char* name;     // kernel: innermost pushed name ("emuKernel" if none); memcpy: NULL
  int device;
  uint64_t stream;      // emuStreamGetId; 0 for the synchronous emuMemcpy
  uint64_t correlation; // the runtime's id of this submission, unique in the process
  uint64_t external_correlation; // innermost pushed external id of the submitter (0: none)
  int32_t api_thread;   // OS thread id of the submitting thread
  int64_t api_start_ns; // the submitting call (emuLaunchKernel...) on the host
  int64_t api_end_ns;
  int64_t start_ns;     // execution on the device
  int64_t end_ns;
  emuMemcpyKind copy_kind; // memcpy only
  size_t bytes;            // memcpy only
} emuActivityRecord;

// Recording starts with emuTraceEnable (dropping records not flushed before)
// and stops with emuTraceDisable; work submitted while enabled is recorded
// when it completes, even after disabling.
emuError_t emuTraceEnable(void);
emuError_t emuTraceDisable(void);
int emuTraceEnabled(void);
// Now, on the trace clock.
int64_t emuTraceTimestamp(void);

// Per host thread. Work submitted by this thread carries the innermost id /
// name. A name must stay valid until popped (the runtime copies it). Popping
// an empty stack is a no-op.
emuError_t emuTracePushExternalCorrelation(uint64_t id);
emuError_t emuTracePopExternalCorrelation(void);
emuError_t emuTracePushName(const char* name);
emuError_t emuTracePopName(void);

// Calls `fn` once per completed record, oldest first, then forgets them. The
// record (and its name) is valid only during the call.
typedef void (*emuActivityFn_t)(const emuActivityRecord* record, void* user_data);
emuError_t emuTraceFlush(emuActivityFn_t fn, void* user_data);

// The stream number trace records carry.
emuError_t emuStreamGetId(emuStream_t stream, uint64_t* id);
// LITERALINCLUDE END: EMU_RUNTIME_TRACE

#ifdef __cplusplus
} // extern "C"
#endif
