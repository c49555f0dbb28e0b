// Graphs: work captured from a stream once and launched again as a whole.
//
// Shaped like CUDA's stream capture:
// - emuStreamBeginCapture puts a stream in capture mode. Until
//   emuStreamEndCapture, the work submitted to it is recorded into a graph, in
//   order: kernels (emuLaunchKernel), copies (emuMemcpyAsync), host functions,
//   event records and waits.
// - Calls that would make the host wait for a capturing stream fail with
//   emuErrorStreamCaptureUnsupported and invalidate the capture:
//   emuStreamSynchronize / emuStreamQuery of it, emuDeviceSynchronize and
//   emuMemcpy on its device, emuEventSynchronize / emuEventQuery of an event
//   recorded in it, and emuMemcpyAsync between it and pageable host memory.
//   emuStreamEndCapture then ends the capture with
//   emuErrorStreamCaptureInvalidated and no graph.
// - emuGraphLaunch submits a graph's work to a stream, in capture order.
//
// One difference from a real device: the host code of an emulated device
// runs its kernels, and that host code may need their results (the sizes of
// the tensors a kernel allocated) before it can go on. So kernels and copies
// recorded during capture also run once, right away, on the calling thread.
// That run must not be visible, as captured work is not on a real device:
// emuStreamEndCapture puts back the contents of the device memory that was
// allocated when the capture began.
//
// A recorded kernel's user_data must stay valid until the graph is destroyed:
// tie it to the graph with emuStreamAttachToCapture (CUDA's user objects).
#pragma once

#include "runtime/emu_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// LITERALINCLUDE START: EMU_RUNTIME_GRAPH
typedef struct emuGraph* emuGraph_t;

typedef enum emuStreamCaptureStatus {
  emuStreamCaptureStatusNone = 0,        // not capturing
  emuStreamCaptureStatusActive = 1,      // capturing
  emuStreamCaptureStatusInvalidated = 2, // capturing, but a forbidden call invalidated it
} emuStreamCaptureStatus;

// Fails with emuErrorInvalidValue if `stream` already captures.
emuError_t emuStreamBeginCapture(emuStream_t stream);
// Ends the capture. On success *graph receives the recorded graph; on
// emuErrorStreamCaptureInvalidated the capture is over and *graph is null.
emuError_t emuStreamEndCapture(emuStream_t stream, emuGraph_t* graph);
emuError_t emuStreamIsCapturing(emuStream_t stream, emuStreamCaptureStatus* status);
// Hands `object` to the graph `stream` is capturing: destroy(object) runs
// when that graph is destroyed (or right away if the capture fails).
emuError_t emuStreamAttachToCapture(emuStream_t stream, void* object, emuHostFn_t destroy);

// Submits the graph's work to `stream`, in capture order (asynchronously, like
// any work: synchronise the stream to wait for it).
emuError_t emuGraphLaunch(emuGraph_t graph, emuStream_t stream);
emuError_t emuGraphGetNodeCount(emuGraph_t graph, size_t* count);
// Node `index` as one line of text ("kernel", "memcpy DeviceToDevice 4096 bytes"...).
emuError_t emuGraphDescribeNode(emuGraph_t graph, size_t index, char* text, size_t size);
emuError_t emuGraphDestroy(emuGraph_t graph);
// LITERALINCLUDE END: EMU_RUNTIME_GRAPH

#ifdef __cplusplus
} // extern "C"
#endif
