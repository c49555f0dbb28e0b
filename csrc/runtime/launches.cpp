// Launches: kernels (emuLaunchKernel, emuLaunchKernelAsync) and host functions
// (emuLaunchHostFunc, emuLaunchHostFuncAsync) put on a stream as work items
// (streams_internal.h), and a kernel's error message.

#include <string>

#include "runtime/streams_internal.h"

// The native runtime's launch calls (plugin.cpp makes them the API).
namespace emu::native {

namespace {

emuError_t launch_host_func(const char* call, emuStream_t stream, emuHostFn_t fn, void* user_data,
                            bool allow_inline) {
  if (emuError_t err = check_stream(call, stream)) return err;
  if (fn == nullptr) return set_error(emuErrorInvalidValue, "%s: fn is null", call);
  emu::GraphNode node{emu::GraphNode::kHostFunc};
  node.host_fn = fn;
  node.user_data = user_data;
  bool captured = false;
  if (emuError_t err = emu::capture_hook(call, stream, node, &captured)) return err;
  if (captured) return emuSuccess;  // host functions run at replay only
  Work w{};
  w.kind = WorkKind::kHostFunc;
  w.host_fn = fn;
  w.user_data = user_data;
  Submitted submitted;
  return submit(call, stream, w, allow_inline || executing_frame(stream) != nullptr, &submitted);
}

} // namespace

emuError_t emuLaunchHostFunc(emuStream_t stream, emuHostFn_t fn, void* user_data) {
  EMU_API_ENTER();
  return launch_host_func("emuLaunchHostFunc", stream, fn, user_data, /*allow_inline=*/true);
}

emuError_t emuLaunchHostFuncAsync(emuStream_t stream, emuHostFn_t fn, void* user_data) {
  EMU_API_ENTER();
  return launch_host_func("emuLaunchHostFuncAsync", stream, fn, user_data, /*allow_inline=*/false);
}

namespace {

emuError_t launch(const char* call, emuStream_t stream, emuKernelFn_t fn, void* user_data, bool allow_inline) {
  if (emuError_t err = check_stream(call, stream)) return err;
  if (fn == nullptr) return set_error(emuErrorInvalidValue, "%s: fn is null", call);
  emu::GraphNode node{emu::GraphNode::kKernel};
  node.kernel_fn = fn;
  node.user_data = user_data;
  bool captured = false;
  if (emuError_t err = emu::capture_hook(call, stream, node, &captured)) return err;
  Work w{};
  w.kind = WorkKind::kKernel;
  w.kernel_fn = fn;
  w.user_data = user_data;
  if (emu::faults_armed()) {
    if (emuError_t err = emu::fault_on_launch(call, stream->device, &w.injected)) {
      return err;
    }
  }
  emu::TracedCall traced(emuActivityKindKernel, stream->device, stream->id);
  w.trace = traced.record();
  Submitted submitted;
  // Work launched from work running on `stream` is part of it: in place.
  allow_inline = allow_inline || executing_frame(stream) != nullptr;
  if (emuError_t err = submit(call, stream, w, allow_inline, &submitted)) {
    traced.not_queued();
    return err;
  }
  if (submitted.rc != 0) {
    if (!t_kernel_message.empty()) {
      return set_error(emuErrorLaunchFailure, "%s: the kernel failed on emu:%d: %s", call, stream->device,
                       t_kernel_message.c_str());
    }
    return set_error(emuErrorLaunchFailure, "%s: the kernel returned %d on emu:%d", call, submitted.rc,
                     stream->device);
  }
  return emuSuccess;
}

} // namespace

emuError_t emuLaunchKernel(emuStream_t stream, emuKernelFn_t fn, void* user_data) {
  EMU_API_ENTER();
  return launch("emuLaunchKernel", stream, fn, user_data, /*allow_inline=*/true);
}

emuError_t emuLaunchKernelAsync(emuStream_t stream, emuKernelFn_t fn, void* user_data) {
  EMU_API_ENTER();
  return launch("emuLaunchKernelAsync", stream, fn, user_data, /*allow_inline=*/false);
}

emuError_t emuKernelSetErrorMessage(const char* message) {
  EMU_API_ENTER();
  if (message == nullptr) return set_error(emuErrorInvalidValue, "emuKernelSetErrorMessage: message is null");
  if (t_frames == nullptr) {
    return set_error(emuErrorInvalidValue, "emuKernelSetErrorMessage: not called from a running kernel");
  }
  t_kernel_message = message;
  return emuSuccess;
}

} // namespace emu::native
