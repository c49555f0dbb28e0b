// The legacy profiler's device stubs for emu.
//
// torch.autograd.profiler.profile(use_device="emu") (and any profiler session
// that asks for PrivateUse1 without a Kineto plugin) times each op on the
// device by recording a device event when the op starts and ends and asking
// for the time between them. The stubs PyTorch installs by default for
// PrivateUse1 only fail, which left every op with a garbage (negative) time.
// Emu's are its timed events: recorded on the current stream, so the time
// between two of them is the device time of the work queued in between.
#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include "core/EmuException.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

emuEvent_t as_event(const ProfilerVoidEventStub* stub) {
  return static_cast<emuEvent_t>(stub->get());
}

// LITERALINCLUDE START: PROFILER_STUBS
struct EmuProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    const c10::DeviceIndex index = current_device();
    if (device != nullptr) {
      *device = index;
    }
    emuEvent_t raw = nullptr;
    EMU_CHECK(emuEventCreateWithFlags(&raw, emuEventDefault));
    *event = std::shared_ptr<void>(raw, [](void* e) { (void)emuEventDestroy(static_cast<emuEvent_t>(e)); });
    if (cpu_ns != nullptr) {
      *cpu_ns = c10::getTime();
    }
    EMU_CHECK(emuEventRecord(raw, native_stream(current_stream(index))));
  }

  // Microseconds, as the profiler expects of every device's stubs.
  float elapsed(const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    EMU_CHECK(emuEventSynchronize(as_event(start)));
    EMU_CHECK(emuEventSynchronize(as_event(end)));
    float ms = 0;
    EMU_CHECK(emuEventElapsedTime(&ms, as_event(start), as_event(end)));
    return ms * 1000.0f;
  }

  // Ranges and marks annotate an external tracing tool (NVTX for CUDA); emu
  // has none, and the profiler's own record_function ranges need nothing here.
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  bool enabled() const override {
    return true;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      const c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, i));
      op(i);
    }
  }

  void synchronize() const override {
    EMU_CHECK(emuDeviceSynchronize(current_device()));
  }
};

const bool registered = [] {
  static EmuProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();
// LITERALINCLUDE END: PROFILER_STUBS

} // namespace
} // namespace torch_emu
