// torch_emu._C bindings for sharing emu storages between processes
// (core/EmuIpc.h); the torch.multiprocessing side is torch_emu/ipc.py.
#include <torch/csrc/Storage.h>
#include <torch/csrc/utils/pybind.h>

#include "core/EmuIpc.h"

namespace torch_emu {
namespace {

const c10::Storage& unpack_storage(const py::handle& obj) {
  TORCH_CHECK_TYPE(THPStorage_Check(obj.ptr()), "expected a torch.UntypedStorage, got ",
                   Py_TYPE(obj.ptr())->tp_name);
  return THPStorage_Unpack(obj.ptr());
}

} // namespace

// LITERALINCLUDE START: IPC_BINDINGS
// _ipc_share(storage) -> (handle, storage_offset, storage_size, ref_counter, slot)
// _ipc_open(handle, storage_offset, storage_size, ref_counter, slot) -> storage
void init_ipc_bindings(pybind11::module& m) {
  m.def("_ipc_share", [](const py::handle& storage) {
    const IpcShare share = share_storage(unpack_storage(storage));
    return py::make_tuple(py::bytes(share.handle), share.storage_offset, share.storage_size,
                          py::reinterpret_steal<py::object>(THPStorage_Wrap(share.ref_counter)),
                          share.ref_counter_slot);
  });
  m.def("_ipc_open", [](const py::bytes& handle, size_t storage_offset, size_t storage_size,
                        const py::handle& ref_counter, size_t slot) {
    const IpcShare share{handle, storage_offset, storage_size, unpack_storage(ref_counter), slot};
    return py::reinterpret_steal<py::object>(THPStorage_Wrap(open_shared_storage(share)));
  });
  m.def("_ipc_release_counter", [](const py::handle& ref_counter, size_t slot) {
    release_ref_counter(unpack_storage(ref_counter), slot);
  });
  m.def("_ipc_collect", [] { return ipc_collect(); }, py::call_guard<py::gil_scoped_release>());
  m.def("_ipc_release_received", [] { release_received_storages(); },
        py::call_guard<py::gil_scoped_release>());
}
// LITERALINCLUDE END: IPC_BINDINGS

} // namespace torch_emu
