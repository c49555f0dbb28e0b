// The device guard: how PyTorch reads and switches the current tpldev device
// (torch.accelerator.set_device_index, `with torch.device(...)`, and the
// guard every op takes on its tensors' device). This device has one stream
// per device and no events: work completes when each call returns.
// Guide: torch-emu docs/guide/device_guard.md
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "core/check.h"

namespace torch_tpldev {
namespace {

// LITERALINCLUDE START: GUARD_IMPL
struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override {
    return kType;
  }

  c10::Device getDevice() const override {
    int device = 0;
    TPLDEV_CHECK(tpldevGetDevice(&device));
    return c10::Device(kType, static_cast<c10::DeviceIndex>(device));
  }

  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kType, "expected a tpldev device, got ", device);
    TPLDEV_CHECK(tpldevSetDevice(device.index()));
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    (void)tpldevSetDevice(device.index()); // restoring a device that was valid
  }

  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device previous = getDevice();
    if (previous != device) {
      setDevice(device);
    }
    return previous;
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(tpldevDeviceCount());
  }

  // The only stream of each device is its default stream.
  c10::Stream getStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return getStream(stream.device());
  }

  bool queryStream(const c10::Stream& /*stream*/) const override {
    return true;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    TPLDEV_CHECK(tpldevDeviceSynchronize(stream.device_index()));
  }

  void synchronizeDevice(c10::DeviceIndex device_index) const override {
    TPLDEV_CHECK(tpldevDeviceSynchronize(device_index));
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);
// LITERALINCLUDE END: GUARD_IMPL

} // namespace
} // namespace torch_tpldev
