// torch_emu._C binding for the emu storage descriptor (EmuStorageImpl); the
// Python API around it is torch_emu/storage.py.
#include <torch/csrc/Storage.h>
#include <torch/csrc/utils/pybind.h>

#include "core/EmuStorageImpl.h"

namespace torch_emu {

// LITERALINCLUDE START: STORAGE_BINDING
// _storage_desc(untyped_storage) -> (id, stream), stream being None or
// (stream_id, device_index, device_type) for torch.Stream(...).
void init_storage_bindings(pybind11::module& m) {
  m.def("_storage_desc", [](const py::handle& obj) {
    TORCH_CHECK_TYPE(THPStorage_Check(obj.ptr()), "expected a torch.UntypedStorage, got ",
                     Py_TYPE(obj.ptr())->tp_name);
    const c10::Storage& storage = THPStorage_Unpack(obj.ptr());
    TORCH_CHECK(storage.device_type() == c10::DeviceType::PrivateUse1,
                "expected the storage of an emu tensor, got one on ", storage.device());
    const EmuStorageImpl* emu = emu_storage_impl(storage);
    TORCH_CHECK(emu != nullptr, "this emu storage was not created by torch-emu (at::from_blob over "
                "emu memory?), so it has no emu storage descriptor");
    const std::optional<c10::Stream> stream = emu->stream();
    py::object stream_args = py::none();
    if (stream.has_value()) {
      stream_args = py::make_tuple(stream->id(), stream->device_index(), static_cast<int>(stream->device_type()));
    }
    return py::make_tuple(emu->id, stream_args);
  });
}
// LITERALINCLUDE END: STORAGE_BINDING

} // namespace torch_emu
