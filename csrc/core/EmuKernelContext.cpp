#include "core/EmuKernelContext.h"

#include <ATen/Parallel.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "core/EmuException.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

thread_local c10::DeviceIndex tls_kernel_device = -1;
thread_local c10::StreamId tls_kernel_stream = -1;
thread_local std::thread::id tls_launcher; // valid while tls_kernel_device >= 0
// Queued launches take numbers in this order (the allocator's stream order).
std::atomic<uint64_t> g_launch_order{0};
thread_local uint64_t tls_queued_order = 0; // the queued kernel this thread runs

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
  tls_queued_order = order;
  const std::lock_guard<std::mutex> lock(g_running_mutex);
  g_running_orders.push_back(order);
}

RunningQueuedKernel::~RunningQueuedKernel() {
  tls_queued_order = 0;
  const std::lock_guard<std::mutex> lock(g_running_mutex);
  g_running_orders.erase(std::find(g_running_orders.begin(), g_running_orders.end(), order_));
}

// LITERALINCLUDE START: RUN_KERNEL
std::exception_ptr run_as_kernel(const c10::Stream& stream, std::thread::id launcher,
                                 c10::function_ref<void()> body) {
  const c10::DeviceIndex device = stream.device_index();
  const c10::DeviceIndex outer_kernel = tls_kernel_device;
  const c10::StreamId outer_kernel_stream = tls_kernel_stream;
  const std::thread::id outer_launcher = tls_launcher;
  int outer_device = 0;
  (void)emuGetDevice(&outer_device);
  const bool switch_device = outer_device != device; // usually the same
  std::exception_ptr error;
  try {
    if (switch_device) {
      EMU_CHECK(emuSetDevice(device));
    }
    const c10::Stream outer_stream = exchange_stream(stream);
    tls_kernel_device = device;
    tls_kernel_stream = stream.id();
    tls_launcher = launcher;
    try {
      body();
    } catch (...) {
      error = std::current_exception();
    }
    exchange_stream(outer_stream);
  } catch (...) {
    error = std::current_exception();
  }
  tls_kernel_device = outer_kernel;
  tls_kernel_stream = outer_kernel_stream;
  tls_launcher = outer_launcher;
  if (switch_device) {
    (void)emuSetDevice(outer_device);
  }
  return error;
}
// LITERALINCLUDE END: RUN_KERNEL

c10::DeviceIndex kernel_device() {
  return tls_kernel_device;
}

// A kernel running on this very stream (a native kernel whose CPU code calls
// other ops) launches what is part of it: the runtime would also run it in
// place (work submitted from inside running work); launch_kernel skips the
// submit, device and stream switches of a launch for it.
bool inside_kernel_on(const c10::Stream& stream) {
  return tls_kernel_device == stream.device_index() && tls_kernel_stream == stream.id();
}

std::thread::id launching_thread() {
  return tls_kernel_device >= 0 ? tls_launcher : std::this_thread::get_id();
}

uint64_t take_launch_order() {
  return g_launch_order.fetch_add(1, std::memory_order_relaxed) + 1;
}

uint64_t launches_ordered() {
  return g_launch_order.load(std::memory_order_relaxed);
}

uint64_t stream_order_now() {
  return tls_queued_order != 0 ? tls_queued_order : g_launch_order.load(std::memory_order_relaxed);
}

uint64_t queued_kernel_launch_order() {
  if (tls_queued_order != 0 || !at::in_parallel_region()) {
    return tls_queued_order;
  }
  return oldest_running_queued_order();
}

} // namespace torch_emu
