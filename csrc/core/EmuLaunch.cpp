#include "core/EmuLaunch.h"

#include <c10/core/CPUAllocator.h>

#include <exception>

#include "core/EmuDeviceAllocator.h"
#include "core/EmuException.h"
#include "core/EmuGraph.h"
#include "core/EmuStream.h"
#include "runtime/emu_runtime_trace.h"

namespace torch_emu {
namespace {

thread_local c10::DeviceIndex tls_kernel_device = -1;
thread_local c10::StreamId tls_kernel_stream = -1;
thread_local std::thread::id tls_launcher; // valid while tls_kernel_device >= 0
c10::DeleterFnPtr cpu_raw_deleter = nullptr;

// Kernels also use raw_allocate/raw_deallocate for scratch space; a raw
// pointer is freed by whichever allocator it came from.
void raw_delete(void* ptr) {
  if (C10_UNLIKELY(is_replayed_block(ptr))) {
    return; // the graph's memory, lent to a replaying kernel
  }
  if (is_device_ptr(ptr)) {
    device_allocator()->raw_deleter()(ptr);
  } else {
    cpu_raw_deleter(ptr);
  }
}

// LITERALINCLUDE START: KERNEL_CPU_ALLOCATOR
// CPU kernels allocate their outputs (and scratch) with the CPU allocator.
// Inside an emu kernel this allocator hands out emu device memory instead, so
// the outputs of a CPU kernel already live on the device and become emu
// tensors without a copy. Outside kernels it is the ordinary CPU allocator.
struct KernelAwareCPUAllocator final : public c10::Allocator {
  explicit KernelAwareCPUAllocator(c10::Allocator* cpu) : cpu_(cpu) {
    cpu_raw_deleter = cpu->raw_deleter();
  }

  c10::DataPtr allocate(size_t nbytes) override {
    if (tls_kernel_device < 0) {
      return cpu_->allocate(nbytes);
    }
    c10::DataPtr data = allocate_device(nbytes);
    // The kernel sees a CPU tensor; the fallback re-tags it as emu after.
    data.unsafe_set_device(c10::Device(c10::DeviceType::CPU));
    return data;
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &raw_delete;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count); // only ever called from inside kernels
  }

 private:
  c10::Allocator* cpu_;
};

const bool cpu_allocator_installed = [] {
  static KernelAwareCPUAllocator allocator(c10::GetCPUAllocator());
  c10::SetCPUAllocator(&allocator, /*priority=*/100);
  return true;
}();
// LITERALINCLUDE END: KERNEL_CPU_ALLOCATOR

struct Launch {
  c10::function_ref<void()> kernel;
  c10::Stream stream;
  std::exception_ptr error;
  std::thread::id launcher;
};

// Runs on the launching thread (stream idle) or on the stream's worker.
int run_kernel(void* user_data) {
  auto* launch = static_cast<Launch*>(user_data);
  launch->error = run_as_kernel(launch->stream, launch->launcher, launch->kernel);
  return launch->error ? 1 : 0;
}

} // namespace

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

// LITERALINCLUDE START: LAUNCH_KERNEL
namespace {

// Launched by a kernel running on this very stream (a native kernel whose CPU
// code calls other ops): it is part of that kernel, run it now. The runtime
// would also run it in place (work submitted from inside running work); this
// skips the submit, device and stream switches of a launch.
bool inside_kernel_on(const c10::Stream& stream) {
  return tls_kernel_device == stream.device_index() && tls_kernel_stream == stream.id();
}

} // namespace

void launch_kernel(const c10::Stream& stream, c10::function_ref<void()> kernel,
                   c10::function_ref<std::function<void()>()> make_replay, const char* what) {
  if (!inside_kernel_on(stream) && C10_UNLIKELY(capture_in_progress()) && is_capturing(stream)) {
    launch_captured(stream, kernel, &make_replay, what);
    return;
  }
  launch_kernel(stream, kernel, what);
}

void launch_kernel(const c10::Stream& stream, c10::function_ref<void()> kernel, const char* what) {
  if (inside_kernel_on(stream)) {
    kernel();
    return;
  }
  if (C10_UNLIKELY(capture_in_progress()) && is_capturing(stream)) {
    launch_captured(stream, kernel, nullptr, what);
    return;
  }
  Launch launch{kernel, stream, nullptr, launching_thread()};
  emuStream_t native = native_stream(stream);
  const emuError_t launched = emuLaunchKernel(native, &run_kernel, &launch);
  // Waiting also makes the kernel's results (and errors) visible here. A
  // launch failure is our own kernel's exception, rethrown below.
  const emuError_t synced = emuStreamSynchronize(native);
  if (launch.error) {
    std::rethrow_exception(launch.error);
  }
  EMU_CHECK(launched);
  EMU_CHECK(synced);
}
// LITERALINCLUDE END: LAUNCH_KERNEL

KernelName::KernelName(const char* name) : pushed_(emuTraceEnabled() != 0) {
  if (pushed_) {
    EMU_CHECK(emuTracePushName(name));
  }
}

KernelName::~KernelName() {
  if (pushed_) {
    (void)emuTracePopName();
  }
}

c10::DeviceIndex kernel_device() {
  return tls_kernel_device;
}

std::thread::id launching_thread() {
  return tls_kernel_device >= 0 ? tls_launcher : std::this_thread::get_id();
}

} // namespace torch_emu
