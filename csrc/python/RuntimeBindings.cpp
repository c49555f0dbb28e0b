// The runtime API implemented by a Python object (torch_emu/runtime/).
//
// _C._install_python_runtime(obj) installs a runtime table
// (runtime/emu_runtime_plugin.h) whose every call takes the GIL and calls a
// method of `obj`: the integration core does not know. What stays in C++ is
// what only C makes sense of: out-parameters, the calling thread's current
// device, handles as pointers, and turning Python exceptions into emuError_t
// with their message.
#include <pthread.h>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

#include "core/EmuException.h"
#include "core/EmuLaunch.h"
#include "runtime/emu_runtime_plugin.h"

namespace py = pybind11;

namespace torch_emu {
namespace {

py::object* g_runtime = nullptr;        // the Python runtime (leaked: outlives the interpreter's last call)
py::object* g_emu_error = nullptr;      // torch_emu.runtime.EmuError
std::atomic<bool> g_open{false};        // cleared when the interpreter starts to exit
std::atomic<bool> g_state_created{false};
std::atomic<bool> g_forked_child{false};
std::atomic<int> g_device_count{0};     // cached: a runtime's device count never changes
thread_local int t_device = 0;
thread_local bool t_in_kernel = false;
thread_local std::string t_kernel_message;

emuError_t fail(emuError_t err, const char* call, const std::string& message) {
  emuRuntimeSetErrorMessage((std::string(call) + ": " + message).c_str());
  return err;
}

// A Python exception as the call's error: an EmuError keeps its code, anything
// else is the runtime's own bug (emuErrorUnknown), said with its type.
emuError_t translate(const char* call, py::error_already_set& e) {
  if (e.matches(*g_emu_error)) {
    return fail(static_cast<emuError_t>(e.value().attr("code").cast<int>()), call, py::str(e.value()));
  }
  return fail(emuErrorUnknown, call,
              std::string("the python runtime raised ") + py::str(e.type().attr("__name__")).cast<std::string>() +
                  ": " + py::str(e.value()).cast<std::string>());
}

// LITERALINCLUDE START: PYTHON_FORWARD
// Runs `body(runtime)` under the GIL. `releases`: the call only releases
// resources, which succeeds once Python is gone (static destructors free
// memory after the interpreter has finished).
template <typename Body>
emuError_t forward(const char* call, Body&& body, bool releases = false) {
  if (g_forked_child.load(std::memory_order_relaxed)) {
    return fail(emuErrorInitializationError, call,
                "the python runtime was used in the parent process before fork(); the child cannot use it. "
                "Use the 'spawn' start method for multiprocessing");
  }
  if (!g_open.load(std::memory_order_acquire)) {
    return releases ? emuSuccess : fail(emuErrorInitializationError, call, "the python runtime has shut down");
  }
  try {
    py::gil_scoped_acquire gil;
    try {
      body(*g_runtime);
      return emuSuccess;
    } catch (py::error_already_set& e) {
      return translate(call, e);
    }
  } catch (const std::exception& e) {
    return fail(emuErrorUnknown, call, e.what());
  }
}
// LITERALINCLUDE END: PYTHON_FORWARD

template <typename T>
emuError_t null_output(const char* call, T* out, const char* what) {
  return out == nullptr ? fail(emuErrorInvalidValue, call, std::string(what) + " is null") : emuSuccess;
}

uintptr_t addr(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

template <typename T>
T handle(uintptr_t value) {
  return reinterpret_cast<T>(value);
}

// Work handed to the Python runtime: a kernel or a host function. Calling it
// runs it on the calling thread, without the GIL; a kernel returns None or the
// message of its failure.
struct Work {
  emuKernelFn_t kernel = nullptr;
  emuHostFn_t host = nullptr;
  void* user_data = nullptr;

  py::object run() const {
    if (host != nullptr) {
      py::gil_scoped_release no_gil;
      host(user_data);
      return py::none();
    }
    int rc = 0;
    std::string message;
    {
      py::gil_scoped_release no_gil;
      const bool outer = t_in_kernel;
      t_in_kernel = true;
      t_kernel_message.clear();
      rc = kernel(user_data);
      message = std::move(t_kernel_message);
      t_in_kernel = outer;
    }
    if (rc == 0) return py::none();
    return py::str(message.empty() ? "the kernel returned " + std::to_string(rc) : message);
  }
};

// ---- the table ---------------------------------------------------------------

emuError_t device_count(int* count) {
  if (emuError_t err = null_output("emuGetDeviceCount", count, "count")) return err;
  int cached = g_device_count.load(std::memory_order_relaxed);
  if (cached == 0) {
    if (emuError_t err = forward("emuGetDeviceCount", [&](py::object& rt) {
          cached = rt.attr("device_count")().cast<int>();
        })) {
      return err;
    }
    g_device_count.store(cached, std::memory_order_relaxed);
  }
  *count = cached;
  return emuSuccess;
}

emuError_t get_device(int* device) {
  if (emuError_t err = null_output("emuGetDevice", device, "device")) return err;
  *device = t_device;
  return emuSuccess;
}

emuError_t set_device(int device) {
  if (emuError_t err = emuRuntimeCheckDevice("emuSetDevice", device)) return err;
  t_device = device;
  return emuSuccess;
}

emuError_t device_properties(emuDeviceProp* prop, int device) {
  if (emuError_t err = null_output("emuGetDeviceProperties", prop, "prop")) return err;
  if (emuError_t err = emuRuntimeCheckDevice("emuGetDeviceProperties", device)) return err;
  return forward("emuGetDeviceProperties", [&](py::object& rt) {
    const py::object p = rt.attr("device_properties")(device);
    *prop = emuDeviceProp{};
    std::snprintf(prop->name, sizeof(prop->name), "%s", p.attr("name").cast<std::string>().c_str());
    prop->totalGlobalMem = p.attr("total_memory").cast<size_t>();
    prop->major = p.attr("major").cast<int>();
    prop->minor = p.attr("minor").cast<int>();
    prop->multiProcessorCount = p.attr("multi_processor_count").cast<int>();
  });
}

emuError_t device_synchronize(int device) {
  if (emuError_t err = emuRuntimeCheckDevice("emuDeviceSynchronize", device)) return err;
  return forward("emuDeviceSynchronize", [&](py::object& rt) { rt.attr("synchronize_device")(device); });
}

emuError_t mem_get_info(int device, size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) {
    return fail(emuErrorInvalidValue, "emuMemGetInfo", "null output pointer");
  }
  if (emuError_t err = emuRuntimeCheckDevice("emuMemGetInfo", device)) return err;
  return forward("emuMemGetInfo", [&](py::object& rt) {
    const auto info = rt.attr("mem_get_info")(device).cast<std::pair<size_t, size_t>>();
    *free_bytes = info.first;
    *total_bytes = info.second;
  });
}

emuError_t malloc_device(void** ptr, size_t size) {
  if (emuError_t err = null_output("emuMalloc", ptr, "ptr")) return err;
  g_state_created.store(true, std::memory_order_relaxed);
  return forward("emuMalloc",
                 [&](py::object& rt) { *ptr = handle<void*>(rt.attr("malloc")(t_device, size).cast<uintptr_t>()); });
}

emuError_t free_device(void* ptr) {
  if (ptr == nullptr) return emuSuccess;
  return forward("emuFree", [&](py::object& rt) { rt.attr("free")(addr(ptr)); }, /*releases=*/true);
}

emuError_t malloc_host(void** ptr, size_t size) {
  if (emuError_t err = null_output("emuMallocHost", ptr, "ptr")) return err;
  g_state_created.store(true, std::memory_order_relaxed);
  return forward("emuMallocHost",
                 [&](py::object& rt) { *ptr = handle<void*>(rt.attr("malloc_host")(size).cast<uintptr_t>()); });
}

emuError_t free_host(void* ptr) {
  if (ptr == nullptr) return emuSuccess;
  return forward("emuFreeHost", [&](py::object& rt) { rt.attr("free_host")(addr(ptr)); }, /*releases=*/true);
}

emuError_t pointer_attributes(emuPointerAttributes* attr, const void* ptr) {
  if (emuError_t err = null_output("emuPointerGetAttributes", attr, "attr")) return err;
  return forward("emuPointerGetAttributes", [&](py::object& rt) {
    const auto type_device = rt.attr("pointer_attributes")(addr(ptr)).cast<std::pair<int, int>>();
    attr->type = static_cast<emuMemoryType>(type_device.first);
    attr->device = type_device.second;
  });
}

emuError_t priority_range(int* least, int* greatest) {
  if (least == nullptr || greatest == nullptr) {
    return fail(emuErrorInvalidValue, "emuDeviceGetStreamPriorityRange", "null output pointer");
  }
  return forward("emuDeviceGetStreamPriorityRange", [&](py::object& rt) {
    const auto range = rt.attr("stream_priority_range")().cast<std::pair<int, int>>();
    *least = range.first;
    *greatest = range.second;
  });
}

emuError_t stream_create(emuStream_t* stream, int priority) {
  if (emuError_t err = null_output("emuStreamCreateWithPriority", stream, "stream")) return err;
  g_state_created.store(true, std::memory_order_relaxed);
  return forward("emuStreamCreateWithPriority", [&](py::object& rt) {
    *stream = handle<emuStream_t>(rt.attr("stream_create")(t_device, priority).cast<uintptr_t>());
  });
}

emuError_t stream_destroy(emuStream_t stream) {
  return forward("emuStreamDestroy", [&](py::object& rt) { rt.attr("stream_destroy")(addr(stream)); },
                 /*releases=*/true);
}

emuError_t stream_device(emuStream_t stream, int* device) {
  if (emuError_t err = null_output("emuStreamGetDevice", device, "device")) return err;
  return forward("emuStreamGetDevice",
                 [&](py::object& rt) { *device = rt.attr("stream_device")(addr(stream)).cast<int>(); });
}

emuError_t stream_priority(emuStream_t stream, int* priority) {
  if (emuError_t err = null_output("emuStreamGetPriority", priority, "priority")) return err;
  return forward("emuStreamGetPriority",
                 [&](py::object& rt) { *priority = rt.attr("stream_priority")(addr(stream)).cast<int>(); });
}

// For the calls whose "not yet" is a status, not a failure.
emuError_t ready_or_not(const char* call, const char* method, uintptr_t object) {
  bool ready = true;
  if (emuError_t err = forward(call, [&](py::object& rt) { ready = rt.attr(method)(object).cast<bool>(); })) {
    return err;
  }
  return ready ? emuSuccess : emuErrorNotReady;
}

emuError_t stream_query(emuStream_t stream) {
  return ready_or_not("emuStreamQuery", "stream_query", addr(stream));
}

emuError_t stream_pending(emuStream_t stream, int* pending) {
  if (emuError_t err = null_output("emuStreamGetPendingWork", pending, "pending")) return err;
  return forward("emuStreamGetPendingWork",
                 [&](py::object& rt) { *pending = rt.attr("stream_pending")(addr(stream)).cast<bool>() ? 1 : 0; });
}

emuError_t stream_synchronize(emuStream_t stream) {
  return forward("emuStreamSynchronize", [&](py::object& rt) { rt.attr("stream_synchronize")(addr(stream)); });
}

emuError_t stream_wait_event(emuStream_t stream, emuEvent_t event) {
  return forward("emuStreamWaitEvent",
                 [&](py::object& rt) { rt.attr("stream_wait_event")(addr(stream), addr(event)); });
}

emuError_t memcpy_sync(void* dst, const void* src, size_t n, emuMemcpyKind kind) {
  return forward("emuMemcpy",
                 [&](py::object& rt) { rt.attr("memcpy")(addr(dst), addr(src), n, static_cast<int>(kind)); });
}

emuError_t memcpy_async(void* dst, const void* src, size_t n, emuMemcpyKind kind, emuStream_t stream) {
  return forward("emuMemcpyAsync", [&](py::object& rt) {
    rt.attr("memcpy_async")(addr(dst), addr(src), n, static_cast<int>(kind), addr(stream));
  });
}

emuError_t launch(const char* call, emuStream_t stream, Work work, bool asynchronous) {
  if (work.kernel == nullptr && work.host == nullptr) return fail(emuErrorInvalidValue, call, "fn is null");
  const char* method = work.kernel != nullptr ? "launch_kernel" : "launch_host_func";
  return forward(call, [&](py::object& rt) { rt.attr(method)(addr(stream), py::cast(work), asynchronous); });
}

emuError_t launch_host_func(emuStream_t stream, emuHostFn_t fn, void* user_data) {
  return launch("emuLaunchHostFunc", stream, Work{nullptr, fn, user_data}, false);
}

emuError_t launch_host_func_async(emuStream_t stream, emuHostFn_t fn, void* user_data) {
  return launch("emuLaunchHostFuncAsync", stream, Work{nullptr, fn, user_data}, true);
}

emuError_t launch_kernel(emuStream_t stream, emuKernelFn_t fn, void* user_data) {
  return launch("emuLaunchKernel", stream, Work{fn, nullptr, user_data}, false);
}

emuError_t launch_kernel_async(emuStream_t stream, emuKernelFn_t fn, void* user_data) {
  return launch("emuLaunchKernelAsync", stream, Work{fn, nullptr, user_data}, true);
}

emuError_t kernel_set_error_message(const char* message) {
  if (message == nullptr) return fail(emuErrorInvalidValue, "emuKernelSetErrorMessage", "message is null");
  if (!t_in_kernel) return fail(emuErrorInvalidValue, "emuKernelSetErrorMessage", "not called from a running kernel");
  t_kernel_message = message;
  return emuSuccess;
}

emuError_t event_create(emuEvent_t* event, unsigned int flags) {
  if (emuError_t err = null_output("emuEventCreateWithFlags", event, "event")) return err;
  if ((flags & ~static_cast<unsigned>(emuEventDisableTiming)) != 0) {
    return fail(emuErrorInvalidValue, "emuEventCreateWithFlags", "invalid flags " + std::to_string(flags));
  }
  return forward("emuEventCreateWithFlags", [&](py::object& rt) {
    *event = handle<emuEvent_t>(rt.attr("event_create")((flags & emuEventDisableTiming) == 0).cast<uintptr_t>());
  });
}

emuError_t event_destroy(emuEvent_t event) {
  return forward("emuEventDestroy", [&](py::object& rt) { rt.attr("event_destroy")(addr(event)); },
                 /*releases=*/true);
}

emuError_t event_record(emuEvent_t event, emuStream_t stream) {
  return forward("emuEventRecord", [&](py::object& rt) { rt.attr("event_record")(addr(event), addr(stream)); });
}

emuError_t event_query(emuEvent_t event) {
  return ready_or_not("emuEventQuery", "event_query", addr(event));
}

emuError_t event_synchronize(emuEvent_t event) {
  return forward("emuEventSynchronize", [&](py::object& rt) { rt.attr("event_synchronize")(addr(event)); });
}

emuError_t event_elapsed_time(float* ms, emuEvent_t start, emuEvent_t end) {
  if (emuError_t err = null_output("emuEventElapsedTime", ms, "ms")) return err;
  return forward("emuEventElapsedTime", [&](py::object& rt) {
    *ms = rt.attr("event_elapsed_time")(addr(start), addr(end)).cast<float>();
  });
}

const emuRuntimeTable kPythonRuntime = {
    "python",
    device_count, get_device, set_device, device_properties, device_synchronize, mem_get_info,
    malloc_device, free_device, malloc_host, free_host, pointer_attributes, priority_range,
    stream_create, stream_destroy, stream_device, stream_priority, stream_query, stream_pending,
    stream_synchronize, stream_wait_event, memcpy_sync, memcpy_async, launch_host_func,
    launch_host_func_async, launch_kernel, launch_kernel_async, kernel_set_error_message,
    event_create, event_destroy, event_record, event_query, event_synchronize, event_elapsed_time,
};

} // namespace

void init_runtime_bindings(py::module& m) {
  py::class_<Work>(m, "_RuntimeWork").def("__call__", &Work::run);
  m.def("_install_python_runtime", [](py::object runtime, py::object emu_error) {
    TORCH_CHECK(g_runtime == nullptr, "a python runtime is already installed");
    g_runtime = new py::object(std::move(runtime));
    g_emu_error = new py::object(std::move(emu_error));
    g_open.store(true, std::memory_order_release);
    const emuError_t installed = emuRuntimeInstall(&kPythonRuntime);
    if (installed != emuSuccess) {
      g_open.store(false, std::memory_order_release);
      delete std::exchange(g_runtime, nullptr);
      delete std::exchange(g_emu_error, nullptr);
      throw_runtime_error(installed, "emuRuntimeInstall");
    }
    // Each launch queued to a stream worker would take the GIL there, and a
    // queued kernel growing the caching allocator would hold its mutex while
    // waiting for the GIL (python_runtime.md): kernels run at once on idle
    // streams unless TORCH_EMU_LAUNCH_QUEUED says otherwise.
    prefer_auto_launch_mode();
    static const int at_fork = pthread_atfork(nullptr, nullptr, [] {
      if (g_state_created.load(std::memory_order_relaxed)) g_forked_child.store(true, std::memory_order_relaxed);
    });
    (void)at_fork;
  });
  m.def("_shutdown_python_runtime", [] { g_open.store(false, std::memory_order_release); });
  m.def("_runtime_name", [] { return std::string(emuRuntimeName()); });
}

} // namespace torch_emu
