// torch_emu._C bindings for torch.compile: the one entry point by which code
// that Inductor generates (torch_emu/compile/inductor.py) runs as device work.
#include <ATen/Context.h>
#include <c10/util/SmallVector.h>
#include <dlfcn.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "aten/kernels/EmuOps.h"
#include "core/EmuGraph.h"
#include "core/EmuLaunch.h"
#include "core/EmuStream.h"
#include "runtime/emu_runtime_trace.h"

namespace torch_emu {

namespace {

// A Python int as int64 (OverflowError beyond it). The caller checked PyLong_Check.
int64_t as_int64(PyObject* obj) {
  const long long value = PyLong_AsLongLong(obj);
  if (value == -1 && PyErr_Occurred()) {
    throw python_error();
  }
  return value;
}

// An emu device index argument of `call`: -1 is the current device (nullopt).
std::optional<c10::DeviceIndex> device_arg(PyObject* obj, const char* call) {
  TORCH_CHECK_TYPE(PyLong_Check(obj), call, ": device must be an int, not ", Py_TYPE(obj)->tp_name);
  const int64_t index = as_int64(obj);
  if (index == -1) {
    return std::nullopt;
  }
  if (index < 0 || index >= device_count()) {
    invalid_device_index(std::to_string(index));
  }
  return static_cast<c10::DeviceIndex>(index);
}

// A METH_FASTCALL function of this file as an attribute of the module.
void add_function(pybind11::module& m, PyMethodDef& def) {
  m.attr(def.ml_name) = py::reinterpret_steal<py::object>(PyCFunction_NewEx(&def, nullptr, m.attr("__name__").ptr()));
}

} // namespace

// LITERALINCLUDE START: QUEUED_LAUNCH
namespace {

// A generated kernel's second entry point (queued_entry in
// torch_emu/compile/inductor.py): its arguments as 64-bit words.
using QueuedEntry = void (*)(const uint64_t*);

// Looked up once per kernel (under the GIL) in the shared library its Python
// entry came from; nullptr for a kernel without one. The map keeps each
// function alive, so that its address keeps naming it.
QueuedEntry queued_entry_of(py::handle fn) {
  static auto* entries = new std::unordered_map<PyObject*, std::pair<py::object, QueuedEntry>>();
  if (auto it = entries->find(fn.ptr()); it != entries->end()) {
    return it->second.second;
  }
  QueuedEntry entry = nullptr;
  const py::object module = py::getattr(fn, "__self__", py::none());
  const py::object file = module.is_none() ? py::none() : py::getattr(module, "__file__", py::none());
  if (py::isinstance<py::str>(file)) {
    if (void* library = dlopen(file.cast<std::string>().c_str(), RTLD_NOW | RTLD_NOLOAD)) {
      entry = reinterpret_cast<QueuedEntry>(dlsym(library, "emu_queued_kernel"));
      dlclose(library); // the module keeps it loaded
    }
  }
  entries->emplace(fn.ptr(), std::make_pair(py::reinterpret_borrow<py::object>(fn), entry));
  return entry;
}

// The arguments of one call: a tensor is its data pointer into device memory,
// an integer itself. false for anything else (the call then keeps Python).
struct Words {
  c10::SmallVector<uint64_t, 16> words; // no allocation for a kernel's usual few arguments
  size_t bytes = 0;                // what the kernel reads and writes
  std::vector<at::Tensor> tensors; // only while a graph captures: it owns what it replays
};

bool pack(PyObject* const* args, Py_ssize_t count, Words& out) {
  const bool capturing = capture_in_progress();
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* arg = args[i];
    if (THPVariable_Check(arg)) {
      const at::Tensor& t = THPVariable_Unpack(arg);
      out.words.push_back(reinterpret_cast<uintptr_t>(t.data_ptr()));
      out.bytes += t.nbytes();
      if (capturing) {
        out.tensors.push_back(t);
      }
    } else if (PyLong_Check(arg)) {
      out.words.push_back(static_cast<uint64_t>(as_int64(arg)));
    } else {
      return false;
    }
  }
  return true;
}

// Launches the call as device work on `stream` without the GIL: behind a
// busy stream it is queued and runs there while the host thread goes on
// with the wrapper, as a GPU kernel does. Onto an idle stream it runs at
// once whatever its size (kAtOnceWhenIdle): the wrapper launches its next
// kernel right after, so there is little for the host to do meanwhile, and
// at once the kernel gets the host thread's team, queued the worker's
// single thread (on two cores: a compiled CNN's training step took 1.3-1.6x
// CPU's with its large kernels queued, 0.8-0.9x run at once). A kernel does
// not own its arguments (the caching allocator reuses a freed buffer in
// stream order), except in a graph.
void queue_generated(const c10::Stream& stream, QueuedEntry entry, Words&& call) {
  const py::gil_scoped_release no_gil;
  queue_kernel(
      stream, [&] { entry(call.words.data()); },
      [&]() -> std::function<void()> {
        return [entry, words = call.words, tensors = std::move(call.tensors)] { entry(words.data()); };
      },
      "inductor kernel", call.bytes, QueueRule::kAtOnceWhenIdle);
}

} // namespace
// LITERALINCLUDE END: QUEUED_LAUNCH

// LITERALINCLUDE START: EMPTY_STRIDED_BINDING
namespace {

// A tuple of Python ints, as the generated wrapper writes sizes and strides.
c10::SmallVector<int64_t, 8> int_tuple(PyObject* tuple, const char* what) {
  TORCH_CHECK_TYPE(PyTuple_Check(tuple), "_empty_strided: ", what, " must be a tuple of ints, not ",
                   Py_TYPE(tuple)->tp_name);
  c10::SmallVector<int64_t, 8> out;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); ++i) {
    PyObject* item = PyTuple_GET_ITEM(tuple, i);
    TORCH_CHECK_TYPE(PyLong_Check(item), "_empty_strided: ", what, " must be a tuple of ints, not of ",
                     Py_TYPE(item)->tp_name);
    out.push_back(as_int64(item));
  }
  return out;
}

// _empty_strided(size, stride, dtype, device): a generated wrapper's buffer
// on emu device `device` (-1: the current one). Inductor writes
// torch.empty_strided(..., device='emu', dtype=...) for a device it does
// not know: the Python binding parses keywords and the device's name, then
// dispatches, about 2 microseconds per buffer, more than a small kernel.
// CPU and CUDA get a direct allocation (empty_strided_cpu, _cuda); this is
// emu's, the same allocation as the emu empty_strided operator's, without
// the dispatch.
PyObject* empty_strided_binding(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 4, "_empty_strided(size, stride, dtype, device) takes 4 arguments, got ", nargs);
  const auto size = int_tuple(args[0], "size");
  const auto stride = int_tuple(args[1], "stride");
  TORCH_CHECK_VALUE(size.size() == stride.size(), "_empty_strided: ", size.size(), " sizes but ",
                    stride.size(), " strides");
  TORCH_CHECK_TYPE(THPDtype_Check(args[2]), "_empty_strided: dtype must be a torch.dtype, not ",
                   Py_TYPE(args[2])->tp_name);
  const at::ScalarType dtype = reinterpret_cast<THPDtype*>(args[2])->scalar_type;
  std::optional<at::Device> device;
  if (const auto index = device_arg(args[3], "_empty_strided")) {
    device = at::Device(c10::DeviceType::PrivateUse1, *index);
  }
  at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1);
  return THPVariable_Wrap(empty_strided(size, stride, dtype, std::nullopt, device, std::nullopt));
  END_HANDLE_TH_ERRORS
}

PyMethodDef g_empty_strided_def = {"_empty_strided", reinterpret_cast<PyCFunction>(
                                       reinterpret_cast<void (*)()>(&empty_strided_binding)),
                                   METH_FASTCALL, "A generated wrapper's emu buffer (no dispatch)."};

} // namespace
// LITERALINCLUDE END: EMPTY_STRIDED_BINDING

// LITERALINCLUDE START: LAUNCH_BINDING
// _launch(device, fn, *args, name=None) calls fn(*args) as ONE kernel on the
// current stream of emu device `device` (-1: the current device) and returns
// its result. `name` (the generated kernel's, e.g. "cpp_fused_relu_0") names
// the kernel in the profiler's device trace; it is only read while one
// records. A generated C++ kernel reads and writes device memory through raw
// pointers, which is only allowed inside a launch (strict mode faults
// otherwise) and only in stream order.
//
// A kernel with a queued entry point is queued (above). Any other fn is
// called with the GIL, and the launch waits for it: the GIL is released
// while it waits, because if the stream is busy the kernel runs on the
// stream's worker thread, which must take the GIL to call fn, while other
// Python threads may be feeding other streams meanwhile. An exception raised
// by fn travels back through launch_kernel and is re-raised here as the same
// Python exception.
namespace {

// A CPython function taking its arguments as they are (METH_FASTCALL), not
// a pybind11 one, which builds a tuple and a dict for *args and **kwargs on
// every call: compiled code calls this once per kernel.
PyObject* launch_binding(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs >= 2, "_launch(device, fn, *args, name=None) takes at least 2 arguments, got ", nargs);
  const c10::DeviceIndex index = device_arg(args[0], "_launch").value_or(-1);
  PyObject* name = nullptr;
  for (Py_ssize_t i = 0; kwnames != nullptr && i < PyTuple_GET_SIZE(kwnames); ++i) {
    TORCH_CHECK_TYPE(PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "name") == 0,
                     "_launch() accepts only the keyword argument 'name'");
    name = args[nargs + i];
  }
  const std::string traced_name =
      emuTraceEnabled() && name != nullptr ? py::handle(name).cast<std::string>() : "inductor_kernel";
  const KernelName kernel_name(traced_name.c_str());
  PyObject* fn = args[1];
  if (const QueuedEntry entry = queued_entry_of(fn)) {
    Words call;
    if (pack(args + 2, nargs - 2, call)) {
      queue_generated(current_stream(index), entry, std::move(call));
      Py_RETURN_NONE;
    }
  }
  py::object result;
  {
    py::gil_scoped_release no_gil;
    launch_kernel(current_stream(index), [&] {
      py::gil_scoped_acquire gil;
      result = py::reinterpret_steal<py::object>(PyObject_Vectorcall(fn, args + 2, nargs - 2, nullptr));
      if (!result) {
        throw py::error_already_set();
      }
    });
  }
  return result.release().ptr();
  END_HANDLE_TH_ERRORS
}

PyMethodDef g_launch_def = {"_launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&launch_binding)),
                            METH_FASTCALL | METH_KEYWORDS, "Runs a generated kernel as device work."};

} // namespace

void init_compile_bindings(pybind11::module& m) {
  add_function(m, g_empty_strided_def);
  add_function(m, g_launch_def);
}
// LITERALINCLUDE END: LAUNCH_BINDING

} // namespace torch_emu
