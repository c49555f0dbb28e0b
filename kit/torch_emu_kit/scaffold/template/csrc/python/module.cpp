// torch_tpldev._C: the few driver functions the Python device module
// (torch_tpldev/device.py) needs. Loading this library also runs the static
// registrations of every other file (guard, allocator, hooks, operators).
// Guide: torch-emu docs/guide/python_frontend.md
#include <torch/csrc/utils/pybind.h>

#include "core/check.h"
#include "core/generator.h"

// LITERALINCLUDE START: PYTHON_BINDINGS
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("device_count", [] { return tpldevDeviceCount(); });
  m.def("current_device", [] {
    int device = 0;
    TPLDEV_CHECK(tpldevGetDevice(&device));
    return device;
  });
  m.def("set_device", [](int device) { TPLDEV_CHECK(tpldevSetDevice(device)); });
  m.def("synchronize", [](int device) { TPLDEV_CHECK(tpldevDeviceSynchronize(device)); });
  m.def("default_generator", [](int device) {
    return torch_tpldev::default_generator(static_cast<c10::DeviceIndex>(device));
  });
}
// LITERALINCLUDE END: PYTHON_BINDINGS
