// PrivateUse1 hooks: the questions ATen asks a backend that has no place in
// the dispatcher (is it available, which generator, is this pointer pinned,
// which device owns this pointer, how to resize a storage...).
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "core/EmuException.h"
#include "core/EmuGenerator.h"
#include "core/EmuHostAllocator.h"
#include "core/EmuLaunch.h"
#include "core/EmuStorageImpl.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

// LITERALINCLUDE START: HOOKS_IMPL
struct EmuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return device_count() > 0;
  }

  // Starting the runtime surfaces configuration and fork errors early; so does
  // reading the launch mode's variables (a bad one would otherwise surface at
  // the first queued kernel, after some ops had run).
  void init() const override {
    int count = 0;
    EMU_CHECK(emuGetDeviceCount(&count));
    launch_mode();
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return new_generator(device_index);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    emuPointerAttributes attr{};
    EMU_CHECK(emuPointerGetAttributes(&attr, data));
    TORCH_CHECK(attr.type == emuMemoryTypeDevice, "pointer ", data, " is not emu device memory");
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(attr.device));
  }

  bool isPinnedPtr(const void* data) const override {
    return is_pinned_ptr(data);
  }

  at::Allocator* getPinnedMemoryAllocator() const override {
    return pinned_memory_allocator();
  }

  // A "primary context" exists once a device has been used by this process.
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return device_initialized(device_index);
  }

  c10::DeviceIndex deviceCount() const override {
    return device_count();
  }

  void setCurrentDevice(c10::DeviceIndex device) const override {
    set_device(device);
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex previous = current_device();
    set_device(device);
    return previous;
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), new_bytes);
  }
};
// LITERALINCLUDE END: HOOKS_IMPL

// LITERALINCLUDE START: HOOKS_REGISTER
const bool registered = [] {
  at::RegisterPrivateUse1HooksInterface(new EmuHooks()); // lives for the process
  return true;
}();
// LITERALINCLUDE END: HOOKS_REGISTER

} // namespace
} // namespace torch_emu
