#include "core/EmuKernelContext.h"

#include <ATen/Parallel.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "core/EmuException.h"
#include "core/EmuStream.h"
#include "runtime/emu_runtime_tls.h"

namespace torch_emu {
namespace {

// The kernel this thread runs, if any. One thread-local object, not one per
// field: in a shared library every thread-local variable a function touches
// costs a call to find it (__tls_get_addr), and a launch touches these often.
struct KernelContext {
  c10::DeviceIndex device = -1;
  c10::StreamId stream = -1;
  std::thread::id launcher; // valid while device >= 0
  uint64_t queued_order = 0; // the queued kernel this thread runs
};
EMU_HOT_TLS thread_local KernelContext tls_kernel;
// Queued launches take numbers in this order (the allocator's stream order).
std::atomic<uint64_t> g_launch_order{0};

// LITERALINCLUDE START: OPENMP_THREADS_ORDER
// The launch orders of the queued kernels running now (one per busy stream).
// The OpenMP threads a kernel's CPU code starts (at::parallel_for) allocate
// for it without its thread-locals; they take the oldest running kernel's
// place in launch order, which is safe for whichever kernel they work for.
std::mutex g_running_mutex;
c10::SmallVector<uint64_t, 8> g_running_orders;

uint64_t oldest_running_queued_order() {
  const std::lock_guard<std::mutex> lock(g_running_mutex);
  return g_running_orders.empty() ? 0 : *std::min_element(g_running_orders.begin(), g_running_orders.end());
}
// LITERALINCLUDE END: OPENMP_THREADS_ORDER

} // namespace

RunningQueuedKernel::RunningQueuedKernel(uint64_t order) : order_(order) {
  tls_kernel.queued_order = order;
  const std::lock_guard<std::mutex> lock(g_running_mutex);
  g_running_orders.push_back(order);
}

RunningQueuedKernel::~RunningQueuedKernel() {
  tls_kernel.queued_order = 0;
  const std::lock_guard<std::mutex> lock(g_running_mutex);
  g_running_orders.erase(std::find(g_running_orders.begin(), g_running_orders.end(), order_));
}

// LITERALINCLUDE START: RUN_KERNEL
std::exception_ptr run_as_kernel(const c10::Stream& stream, std::thread::id launcher,
                                 c10::function_ref<void()> body) {
  const c10::DeviceIndex device = stream.device_index();
  KernelContext& context = tls_kernel;
  const KernelContext outer = context;
  int outer_device = 0;
  (void)emuGetDevice(&outer_device);
  const bool switch_device = outer_device != device; // usually the same
  std::exception_ptr error;
  try {
    if (switch_device) {
      EMU_CHECK(emuSetDevice(device));
    }
    const c10::Stream outer_stream = exchange_stream(stream);
    context.device = device;
    context.stream = stream.id();
    context.launcher = launcher;
    try {
      body();
    } catch (...) {
      error = std::current_exception();
    }
    exchange_stream(outer_stream);
  } catch (...) {
    error = std::current_exception();
  }
  context.device = outer.device;
  context.stream = outer.stream;
  context.launcher = outer.launcher;
  if (switch_device) {
    (void)emuSetDevice(outer_device);
  }
  return error;
}
// LITERALINCLUDE END: RUN_KERNEL

c10::DeviceIndex kernel_device() {
  return tls_kernel.device;
}

// A kernel running on this very stream (a native kernel whose CPU code calls
// other ops) launches what is part of it: the runtime would also run it in
// place (work submitted from inside running work); launch_kernel skips the
// submit, device and stream switches of a launch for it.
bool inside_kernel_on(const c10::Stream& stream) {
  const KernelContext& context = tls_kernel;
  return context.device == stream.device_index() && context.stream == stream.id();
}

std::thread::id launching_thread() {
  const KernelContext& context = tls_kernel;
  return context.device >= 0 ? context.launcher : std::this_thread::get_id();
}

uint64_t take_launch_order() {
  return g_launch_order.fetch_add(1, std::memory_order_relaxed) + 1;
}

uint64_t launches_ordered() {
  return g_launch_order.load(std::memory_order_relaxed);
}

uint64_t stream_order_now() {
  const uint64_t order = tls_kernel.queued_order;
  return order != 0 ? order : g_launch_order.load(std::memory_order_relaxed);
}

uint64_t queued_kernel_launch_order() {
  const uint64_t order = tls_kernel.queued_order;
  if (order != 0 || !at::in_parallel_region()) {
    return order;
  }
  return oldest_running_queued_order();
}

} // namespace torch_emu
