// Graph capture and replay (torch.accelerator.Graph, torch.emu.EmuGraph) as
// the integration core sees it: which stream captures, where the memory of
// captured work comes from, and how a captured kernel runs again.
#pragma once

#include <c10/core/Stream.h>
#include <c10/util/FunctionRef.h>

#include <functional>

namespace torch_emu {

// True while a capture is in progress on any device (one relaxed load).
bool capture_in_progress();
// Whether `stream` is capturing a graph.
bool is_capturing(const c10::Stream& stream);
// Throws (and invalidates the capture) if the current stream of the current
// device captures: `operation` would make the host wait for captured work.
void check_not_capturing(const char* operation);
// Throws torch.AcceleratorError if `device` is capturing a graph already:
// one capture per device at a time (torch.emu.graph checks before it
// synchronises, which would invalidate that capture).
void check_no_capture(c10::DeviceIndex device);


// Called by launch_kernel for a launch onto a capturing stream: records the
// kernel into the graph and runs it once (its results are needed now).
// `make_replay` (null: the kernel cannot be captured) returns a closure that
// owns what the kernel reads and runs it again on the same memory.
void launch_captured(const c10::Stream& stream, c10::function_ref<void()> kernel,
                     c10::function_ref<std::function<void()>()>* make_replay, const char* what);

} // namespace torch_emu
