// Which kernel the calling thread runs: its device and stream, the thread
// that launched it, and its place in launch order. Launches and graph replays
// set it (run_as_kernel); the caching allocator reads it (stream order, which
// thread a use_mem_pool routes), and so do kernels that behave differently
// inside device work. It sits below the allocator, graphs and launches, which
// all need it and none of which it needs.
#pragma once

#include <c10/core/Stream.h>
#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <exception>
#include <thread>

namespace torch_emu {

// Runs `body` as device work of `stream`, launched by `launcher`, on this
// thread (current device and stream, and the kernel_device() that the kernel
// allocator reads); returns what it threw. For the runtime's launches
// (launch_kernel, captured kernels of graphs).
std::exception_ptr run_as_kernel(const c10::Stream& stream, std::thread::id launcher,
                                 c10::function_ref<void()> body);

// The device whose work the calling thread is running, or -1 outside kernels.
c10::DeviceIndex kernel_device();

// Whether the calling thread runs a kernel of `stream` right now: what it
// launches onto that stream is part of that kernel.
bool inside_kernel_on(const c10::Stream& stream);

// The thread that launched the kernel the calling thread runs (the outermost
// launcher for nested launches), or the calling thread outside kernels: whose
// behalf allocations are made on (torch.emu.use_mem_pool routes by it).
std::thread::id launching_thread();

// Launch order, for the caching allocator's stream order: every queued launch
// takes the next number (take_launch_order). stream_order_now() is where the
// calling thread is in it (the number of its queued kernel inside one, else
// the latest launch); queued_kernel_launch_order() is that number inside a
// queued kernel (also on the OpenMP threads working for one), else 0.
uint64_t take_launch_order();
uint64_t launches_ordered();
uint64_t stream_order_now();
uint64_t queued_kernel_launch_order();

// While it lives, the calling thread runs the queued kernel of launch order
// `order` (set by the stream's worker or a thread waiting for the stream).
class RunningQueuedKernel {
 public:
  explicit RunningQueuedKernel(uint64_t order);
  ~RunningQueuedKernel();
  RunningQueuedKernel(const RunningQueuedKernel&) = delete;
  RunningQueuedKernel& operator=(const RunningQueuedKernel&) = delete;

 private:
  const uint64_t order_;
};

} // namespace torch_emu
