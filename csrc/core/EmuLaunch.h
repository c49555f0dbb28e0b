// The one path by which device work runs: every kernel (native or fallback)
// is launched onto an emu stream through the runtime.
#pragma once

#include <c10/core/Stream.h>
#include <c10/util/FunctionRef.h>

#include <exception>
#include <functional>
#include <thread>

namespace torch_emu {

// Runs `kernel` as device work in the order of `stream` and waits for it to
// finish (kernels may produce tensors whose shapes the caller needs; a later
// issue makes this asynchronous). While it runs, on whatever thread runs it,
// the current emu device and stream are those of `stream`, and host
// allocations made by CPU kernels come from emu device memory. An exception
// thrown by `kernel` is rethrown here.
// While `stream` captures a graph (EmuGraph.h) this form cannot record the
// kernel and fails, naming `what` (by default the calling function).
void launch_kernel(const c10::Stream& stream, c10::function_ref<void()> kernel,
                   const char* what = __builtin_FUNCTION());
// The capturable form: while `stream` captures, `make_replay()` is called once
// for a closure that owns everything the kernel reads and runs it again on
// the same memory, each time the graph is replayed.
void launch_kernel(const c10::Stream& stream, c10::function_ref<void()> kernel,
                   c10::function_ref<std::function<void()>()> make_replay,
                   const char* what = __builtin_FUNCTION());

// Runs `body` as device work of `stream`, launched by `launcher`, on this
// thread (current device and stream, kernel allocator); returns what it
// threw. For the runtime's launches (launch_kernel, captured kernels of graphs).
std::exception_ptr run_as_kernel(const c10::Stream& stream, std::thread::id launcher,
                                 c10::function_ref<void()> body);

// Names the kernels the calling thread launches while it lives (innermost
// wins) in the profiler's device trace; by default a kernel is named after the
// operator that launched it. Costs one relaxed load when no trace records.
class KernelName {
 public:
  explicit KernelName(const char* name);
  ~KernelName();
  KernelName(const KernelName&) = delete;
  KernelName& operator=(const KernelName&) = delete;

 private:
  bool pushed_;
};

// The device whose work the calling thread is running, or -1 outside kernels.
c10::DeviceIndex kernel_device();

// The thread that launched the kernel the calling thread runs (the outermost
// launcher for nested launches), or the calling thread outside kernels: whose
// behalf allocations are made on (torch.emu.use_mem_pool routes by it).
std::thread::id launching_thread();

} // namespace torch_emu
