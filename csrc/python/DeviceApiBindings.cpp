// Bindings for the torch.cuda names torch.emu adds on top of the basics of
// Module.cpp: device activity (utilization, memory_usage), the device
// attributes get_device_properties reports, external streams, error strings.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>

#include <torch/csrc/utils/pybind.h>

#include "core/EmuException.h"
#include "core/EmuStream.h"
#include "runtime/emu_runtime_attributes.h"
#include "runtime/emu_runtime_stats.h"

namespace torch_emu {
namespace {

py::dict device_attributes(c10::DeviceIndex device) {
  check_device_index(device);
  auto attribute = [device](emuDeviceAttr attr) {
    int value = 0;
    EMU_CHECK(emuDeviceGetAttribute(&value, attr, device));
    return value;
  };
  unsigned char id[16];
  EMU_CHECK(emuDeviceGetUuid(id, device));
  char uuid[37];
  std::snprintf(uuid, sizeof(uuid), "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", id[0],
                id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11], id[12], id[13], id[14],
                id[15]);
  py::dict d;
  d["is_integrated"] = attribute(emuDevAttrIntegrated);
  d["is_multi_gpu_board"] = attribute(emuDevAttrMultiGpuBoard);
  d["max_threads_per_multi_processor"] = attribute(emuDevAttrMaxThreadsPerMultiProcessor);
  d["warp_size"] = attribute(emuDevAttrWarpSize);
  d["L2_cache_size"] = attribute(emuDevAttrL2CacheSize);
  d["clock_rate"] = attribute(emuDevAttrClockRate);
  d["memory_clock_rate"] = attribute(emuDevAttrMemoryClockRate);
  d["memory_bus_width"] = attribute(emuDevAttrGlobalMemoryBusWidth);
  d["shared_memory_per_block"] = attribute(emuDevAttrSharedMemoryPerBlock);
  d["shared_memory_per_multiprocessor"] = attribute(emuDevAttrSharedMemoryPerMultiprocessor);
  d["uuid"] = std::string(uuid);
  return d;
}

// LITERALINCLUDE START: SLEEP_KERNEL
// torch.emu._sleep(cycles), as torch.cuda._sleep: keeps the current stream
// busy for `cycles` clock cycles of the device (its clock rate attribute,
// 1 GHz if that is 0) and returns at once. Tests use it to hold a stream up on
// purpose. It is a host function on the stream's worker that sleeps: the
// device is busy, the host's cores are not, and since it touches no device
// memory, strict mode keeps that memory closed meanwhile.
// The duration travels in the pointer itself: nothing to own, and a graph
// may replay the call any number of times.
void sleep_on_stream(void* micros) {
  std::this_thread::sleep_for(std::chrono::microseconds(reinterpret_cast<uintptr_t>(micros)));
}

void sleep_kernel(int64_t cycles) {
  TORCH_CHECK(cycles >= 0, "torch.emu._sleep: cycles must be non-negative, got ", cycles);
  const c10::DeviceIndex device = current_device();
  int clock_khz = 0;
  EMU_CHECK(emuDeviceGetAttribute(&clock_khz, emuDevAttrClockRate, device));
  constexpr int kNominalKhz = 1000000; // when the host does not tell its clock: 1 GHz
  const auto micros = static_cast<uintptr_t>(cycles * 1000 / (clock_khz > 0 ? clock_khz : kNominalKhz));
  EMU_CHECK(emuLaunchHostFuncAsync(native_stream(current_stream(device)), &sleep_on_stream,
                                   reinterpret_cast<void*>(micros)));
}
// LITERALINCLUDE END: SLEEP_KERNEL

} // namespace

// LITERALINCLUDE START: DEVICE_API_BINDINGS
void init_device_api_bindings(pybind11::module& m) {
  m.def("_device_attributes", &device_attributes);
  m.def("_utilization", [](c10::DeviceIndex device) {
    check_device_index(device);
    emuUtilization u{};
    EMU_CHECK(emuDeviceGetUtilizationRates(device, &u));
    return std::make_pair(u.kernel, u.memory);
  });
  m.def("_utilization_period_ms", [] { return emuUtilizationSamplePeriodMs(); });
  // (stream id, device index, device type) for torch.Stream, like
  // torch._C._cuda_getStreamFromExternal.
  m.def("_stream_from_external", [](uintptr_t handle, c10::DeviceIndex device) {
    const c10::Stream s = stream_from_external(reinterpret_cast<emuStream_t>(handle), device);
    return py::make_tuple(s.id(), s.device_index(), static_cast<int>(s.device_type()));
  });
  m.def("_sleep", &sleep_kernel);
  m.def("_error_string", [](int code) { return std::string(emuGetErrorString(static_cast<emuError_t>(code))); });
}
// LITERALINCLUDE END: DEVICE_API_BINDINGS

} // namespace torch_emu
