// The PrivateUse1 hooks: what ATen asks a backend outside the dispatcher
// (is it available, its default and new generators, which device owns a
// pointer, whether a device was used yet).
// Guide: torch-emu docs/guide/hooks.md
#include <ATen/detail/PrivateUse1HooksInterface.h>


#include "core/check.h"
#include "core/generator.h"

namespace torch_tpldev {
namespace {

// LITERALINCLUDE START: HOOKS_IMPL
struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return tpldevDeviceCount() > 0;
  }

  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(tpldevDeviceCount());
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return new_generator(device_index);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    int device = 0;
    TPLDEV_CHECK(tpldevPointerGetDevice(data, &device));
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
  }

  // Host memory is never pinned by this driver.
  bool isPinnedPtr(const void* /*data*/) const override {
    return false;
  }

  // Devices need no initialization: each one is ready as soon as the driver loads.
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return device_index >= 0 && device_index < tpldevDeviceCount();
  }
};

// Registered when the library loads; lives for the whole process.
const bool registered = (at::RegisterPrivateUse1HooksInterface(new Hooks()), true);
// LITERALINCLUDE END: HOOKS_IMPL

} // namespace
} // namespace torch_tpldev
