// The device guard: how PyTorch switches the current emu device and stream,
// and drives events, for DeviceGuard/StreamGuard, torch.Stream, torch.Event
// and torch.accelerator.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "core/EmuDeviceAllocator.h"
#include "core/EmuException.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

constexpr auto kEmu = c10::DeviceType::PrivateUse1;

c10::Device emu_device(c10::DeviceIndex index) {
  return c10::Device(kEmu, index);
}

// A query that reports "not ready" is not an error; anything else is.
bool completed(emuError_t status, const char* call) {
  if (status == emuErrorNotReady) {
    return false;
  }
  if (status != emuSuccess) {
    throw_runtime_error(status, call);
  }
  return true;
}

// LITERALINCLUDE START: GUARD_IMPL
struct EmuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kEmu;
  }

  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::DeviceIndex previous = current_device();
    if (device.index() != previous) {
      set_device(device.index());
    }
    return emu_device(previous);
  }

  c10::Device getDevice() const override {
    return emu_device(current_device());
  }

  void setDevice(c10::Device device) const override {
    set_device(device.index());
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    // Called from guard destructors: restoring a device that was valid when
    // the guard was made cannot fail, and a destructor must not throw.
    (void)emuSetDevice(device.index());
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }
  // LITERALINCLUDE END: GUARD_IMPL

  // LITERALINCLUDE START: GUARD_CAPABILITY
  // torch.accelerator.get_device_capability: the dtypes a tensor can be
  // allocated with and converted between on the device. Emu kernels are
  // PyTorch's CPU kernels, so that is what CPU can do: every dtype but the
  // placeholder ones that have no kernels anywhere, not even a copy.
  // tests/test_hooks.py allocates and round-trips each reported dtype.
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    check_device_index(device.index() < 0 ? current_device() : device.index());
    c10::DeviceCapability capability; // starts with every dtype
    auto& types = capability.capability_data.supported_scalar_types;
    types.has_Bits1x8 = types.has_Bits2x4 = types.has_Bits4x2 = 0;
    types.has_Bits8 = types.has_Bits16 = 0;
    types.has_UInt1 = types.has_UInt2 = types.has_UInt3 = types.has_UInt4 = 0;
    types.has_UInt5 = types.has_UInt6 = types.has_UInt7 = 0;
    types.has_Int1 = types.has_Int2 = types.has_Int3 = types.has_Int4 = 0;
    types.has_Int5 = types.has_Int6 = types.has_Int7 = 0;
    types.has_Float4_e2m1fn_x2 = 0;
    return capability;
  }
  // LITERALINCLUDE END: GUARD_CAPABILITY

  // LITERALINCLUDE START: GUARD_STREAMS
  c10::Stream getStream(c10::Device device) const override {
    return current_stream(device.index());
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return default_stream(device.index());
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool isHighPriority) const override {
    return stream_from_pool(device.index(), isHighPriority);
  }

  // Like torch.cuda.Stream(), a "new" stream comes from the pools, so user
  // code that creates streams in a loop cannot exhaust the device.
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    return stream_from_pool(device.index(), priority < 0);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return exchange_stream(stream);
  }

  void* getStreamNativeHandle(const c10::Stream stream) const override {
    return native_stream(stream);
  }

  bool queryStream(const c10::Stream& stream) const override {
    return completed(emuStreamQuery(native_stream(stream)), "emuStreamQuery");
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    EMU_CHECK(emuStreamSynchronize(native_stream(stream)));
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    // Honour the index we are given (not the current device).
    check_device_index(device_index);
    EMU_CHECK(emuDeviceSynchronize(device_index));
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    device_allocator()->recordStream(data_ptr, stream);
  }
  // LITERALINCLUDE END: GUARD_STREAMS

  // LITERALINCLUDE START: GUARD_EVENTS
  // Events are created lazily at their first record, as CUDA's are. PyTorch's
  // default flag means "no timing"; BACKEND_DEFAULT (enable_timing=True) times.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "Event device index ", static_cast<int>(device_index),
                " does not match recording stream's device ", stream.device());
    if (*event == nullptr) {
      emuEvent_t created = nullptr;
      const unsigned flags = flag == c10::EventFlag::BACKEND_DEFAULT ? emuEventDefault : emuEventDisableTiming;
      EMU_CHECK(emuEventCreateWithFlags(&created, flags));
      *event = created;
    }
    EMU_CHECK(emuEventRecord(static_cast<emuEvent_t>(*event), native_stream(stream)));
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) {
      return; // never recorded: nothing to wait for
    }
    EMU_CHECK(emuStreamWaitEvent(native_stream(stream), static_cast<emuEvent_t>(event)));
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) {
      return true;
    }
    return completed(emuEventQuery(static_cast<emuEvent_t>(event)), "emuEventQuery");
  }

  void synchronizeEvent(void* event) const override {
    if (event != nullptr) {
      EMU_CHECK(emuEventSynchronize(static_cast<emuEvent_t>(event)));
    }
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    float ms = 0;
    EMU_CHECK(emuEventElapsedTime(&ms, static_cast<emuEvent_t>(start), static_cast<emuEvent_t>(end)));
    return ms;
  }

  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {
    if (event != nullptr) {
      (void)emuEventDestroy(static_cast<emuEvent_t>(event));
    }
  }
  // LITERALINCLUDE END: GUARD_EVENTS
};

// LITERALINCLUDE START: GUARD_REGISTER
C10_REGISTER_GUARD_IMPL(PrivateUse1, EmuGuardImpl);
// LITERALINCLUDE END: GUARD_REGISTER

} // namespace
} // namespace torch_emu
