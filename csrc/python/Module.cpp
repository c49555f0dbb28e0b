// torch_emu._C: the few runtime entry points Python needs that PyTorch's own
// Python API (torch.accelerator, torch.Stream, torch.Event, torch.Generator)
// does not already reach through the registered guard, hooks and allocator.
#include <ATen/Parallel.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include "aten/EmuFallback.h"
#include "aten/EmuFallbackReport.h"
#include "aten/kernels/EmuNativeKernels.h"
#include "core/EmuException.h"
#include "core/EmuLaunch.h"
#include "core/EmuGenerator.h"
#include "core/EmuStream.h"
#include "core/EmuSyncDebug.h"
#include "runtime/emu_runtime_perf.h"

namespace torch_emu {
namespace {

py::dict device_properties(c10::DeviceIndex device) {
  check_device_index(device);
  emuDeviceProp prop{};
  EMU_CHECK(emuGetDeviceProperties(&prop, device));
  py::dict d;
  d["name"] = std::string(prop.name);
  d["total_memory"] = prop.totalGlobalMem;
  d["major"] = prop.major;
  d["minor"] = prop.minor;
  d["multi_processor_count"] = prop.multiProcessorCount;
  return d;
}

// A CPU tensor over an emu tensor's device memory, for host-side libraries
// that read and write memory directly (Gloo, for the c10d backend). It holds a
// reference to the emu storage, so the memory lives as long as the alias.
// Callers order it with the device themselves (synchronise the stream first).
at::Tensor host_alias(const at::Tensor& emu) {
  TORCH_CHECK(emu.device().type() == c10::DeviceType::PrivateUse1, "host_alias expects an emu tensor, got one on ",
              emu.device());
  c10::StorageImpl* storage = emu.storage().unsafeGetStorageImpl();
  c10::raw::intrusive_ptr::incref(storage);
  c10::DataPtr data(storage->mutable_data(), storage, [](void* ctx) {
    c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
  }, c10::Device(c10::DeviceType::CPU));
  c10::Storage cpu(c10::Storage::use_byte_size_t(), storage->nbytes(), std::move(data), nullptr, false);
  return at::empty({0}, emu.options().device(at::kCPU)).set_(cpu, emu.storage_offset(), emu.sizes(), emu.strides());
}

} // namespace

void init_serialization_bindings(pybind11::module& m); // SerializationBindings.cpp
void init_compile_bindings(pybind11::module& m); // CompileBindings.cpp
void init_storage_bindings(pybind11::module& m); // StorageBindings.cpp
void init_device_api_bindings(pybind11::module& m); // DeviceApiBindings.cpp
void init_ipc_bindings(pybind11::module& m); // IpcBindings.cpp
void init_graph_bindings(pybind11::module& m); // GraphBindings.cpp
void init_memory_bindings(pybind11::module& m); // MemoryBindings.cpp
void init_fault_bindings(pybind11::module& m); // FaultBindings.cpp
void init_runtime_bindings(pybind11::module& m); // RuntimeBindings.cpp

// LITERALINCLUDE START: PYTHON_BINDINGS
PYBIND11_MODULE(_C, m) {
  m.doc() = "torch-emu native extension: runtime, PrivateUse1 integration core and kernels";
  const bool native_kernels = register_native_kernels();
  route_structured_ops_to_fallback(); // after every kernel registration
  route_sparse_ops_to_fallback();
  m.def("_native_kernels", [native_kernels] { return native_kernels; });
  // Starts the device as PyTorch's lazy initialisation does; raises its error
  // (bad configuration, use after fork) as a Python exception.
  m.def("_init", [] { at::detail::getPrivateUse1Hooks().init(); });
  m.def("_device_count", [] { return static_cast<int>(device_count()); });
  m.def("_current_device", [] { return static_cast<int>(current_device()); });
  m.def("_set_device", [](c10::DeviceIndex d) { set_device(d); });
  // torch.emu's device check: any Python int, so that an index too large for
  // c10::DeviceIndex is named like any other out-of-range one.
  m.def("_check_device_index", [](const py::int_& device) {
    int overflow = 0;
    const long long index = PyLong_AsLongLongAndOverflow(device.ptr(), &overflow);
    if (overflow != 0 || index != static_cast<c10::DeviceIndex>(index)) {
      invalid_device_index(py::str(device));
    }
    check_device_index(static_cast<c10::DeviceIndex>(index));
  });
  m.def("_synchronize", [](c10::DeviceIndex d) {
    check_device_index(d);
    py::gil_scoped_release no_gil; // other Python threads may feed the streams
    EMU_CHECK(emuDeviceSynchronize(d));
  });
  m.def("_is_device_initialized", [](c10::DeviceIndex d) { return device_initialized(d); });
  m.def("_get_device_properties", &device_properties);
  m.def("_strict_mode", [] { return emuStrictMode() != 0; });
  m.def("_launch_mode", [] {
    switch (launch_mode()) {
      case LaunchMode::kAdaptive: return "adaptive";
      case LaunchMode::kQueued: return "queued";
      case LaunchMode::kBlocking: return "blocking";
      case LaunchMode::kAuto: return "auto";
    }
    return "auto";
  });
  // (queued, at once, waited): kernel launches so far (EmuLaunch.h), reported
  // by the demo and benchmarks/bench_async.py.
  m.def("_launch_counts", [] {
    const LaunchCounts counts = launch_counts();
    return py::make_tuple(counts.queued, counts.at_once, counts.waited);
  });
  // For tests of the OpenMP teams kernels get (EmuLaunch.cpp): launches a
  // kernel that says it reads and writes `bytes` and stores the number of
  // threads its CPU code would use into `out` (one int32 element on emu).
  m.def("_kernel_threads", [](const at::Tensor& out, int64_t bytes) {
    TORCH_CHECK(out.device().type() == c10::DeviceType::PrivateUse1 && out.scalar_type() == at::kInt &&
                    out.numel() == 1 && out.is_contiguous() && bytes >= 0,
                "_kernel_threads: expected one int32 element on an emu device and bytes >= 0");
    const c10::Stream stream = current_stream(out.device().index());
    int32_t* slot = out.data_ptr<int32_t>();
    auto kernel = [slot] { *slot = at::get_num_threads(); };
    const py::gil_scoped_release no_gil;
    queue_kernel(stream, kernel, [&]() -> std::function<void()> { return kernel; }, "_kernel_threads",
                 static_cast<size_t>(bytes));
  });
  // The runtime's performance model (TORCH_EMU_PROFILE), for tests and benchmarks.
  m.def("_performance_model", [] {
    emuPerformanceModel model{};
    EMU_CHECK(emuGetPerformanceModel(&model));
    py::dict out;
    out["h2d_bytes_per_second"] = model.h2d_bytes_per_second;
    out["d2h_bytes_per_second"] = model.d2h_bytes_per_second;
    out["d2d_bytes_per_second"] = model.d2d_bytes_per_second;
    out["peer_bytes_per_second"] = model.peer_bytes_per_second;
    out["launch_latency_seconds"] = model.launch_latency_seconds;
    out["kernel_slowdown"] = model.kernel_slowdown;
    return out;
  });
  m.def("_stream_priority_range", [] {
    int least = 0, greatest = 0;
    EMU_CHECK(emuDeviceGetStreamPriorityRange(&least, &greatest));
    return std::make_pair(least, greatest);
  });
  m.def("_stream_priority", [](int64_t stream_id, c10::DeviceIndex device) {
    return stream_priority(c10::Stream(c10::Stream::UNSAFE,
                                       c10::Device(c10::DeviceType::PrivateUse1, device), stream_id));
  });
  m.def("_host_alias", &host_alias);
  m.def("_set_fallback_recording", &set_fallback_recording);
  m.def("_set_fallback_error", &set_fallback_error);
  m.def("_take_fallback_records", [] {
    py::list out;
    for (const FallbackRecord& r : take_fallback_records()) {
      out.append(py::make_tuple(r.op, r.count, r.nanoseconds));
    }
    return out;
  });
  m.def("_fallback_routed_ops", [] { return fallback_routed_ops(); });
  m.def("_set_sync_debug_mode", &set_sync_debug_mode);
  m.def("_get_sync_debug_mode", &sync_debug_mode);
  m.def("_default_generator", [](c10::DeviceIndex device) {
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(default_generator(device)));
  });
  init_serialization_bindings(m);
  init_compile_bindings(m);
  init_storage_bindings(m);
  init_device_api_bindings(m);
  init_ipc_bindings(m);
  init_graph_bindings(m);
  init_memory_bindings(m);
  init_fault_bindings(m);
  init_runtime_bindings(m);
}
// LITERALINCLUDE END: PYTHON_BINDINGS

} // namespace torch_emu
