// torch_emu._C bindings for torch.compile: the one entry point by which code
// that Inductor generates (torch_emu/compile/inductor.py) runs as device work.
#include <torch/csrc/utils/pybind.h>

#include "core/EmuLaunch.h"
#include "core/EmuStream.h"
#include "runtime/emu_runtime_trace.h"

namespace torch_emu {

// LITERALINCLUDE START: LAUNCH_BINDING
// _launch(device, fn, *args, name=None) calls fn(*args) as ONE kernel on the
// current stream of emu device `device` (-1: the current device) and returns
// its result. `name` (the generated kernel's, e.g. "cpp_fused_relu_0") names
// the kernel in the profiler's device trace; it is only read while one
// records. A generated C++ kernel reads and writes device memory through raw
// pointers, which is only allowed inside a launch (strict mode faults
// otherwise) and only in stream order.
//
// The GIL is released while the launch waits: if the stream is busy the
// kernel runs on the stream's worker thread, which must take the GIL to call
// fn, while other Python threads may be feeding other streams meanwhile. An
// exception raised by fn travels back through launch_kernel and is re-raised
// here as the same Python exception.
void init_compile_bindings(pybind11::module& m) {
  m.def("_launch", [](c10::DeviceIndex device, const py::function& fn, const py::args& args,
                      const py::kwargs& kwargs) {
    if (device >= 0) {
      check_device_index(device);
    }
    if (kwargs.size() > (kwargs.contains("name") ? 1u : 0u)) {
      throw py::type_error("_launch() accepts only the keyword argument 'name'");
    }
    const std::string name =
        emuTraceEnabled() && kwargs.contains("name") ? kwargs["name"].cast<std::string>() : "inductor_kernel";
    const KernelName kernel_name(name.c_str());
    py::object result;
    {
      py::gil_scoped_release no_gil;
      launch_kernel(current_stream(device), [&] {
        py::gil_scoped_acquire gil;
        result = fn(*args);
      });
    }
    return result;
  });
}
// LITERALINCLUDE END: LAUNCH_BINDING

} // namespace torch_emu
