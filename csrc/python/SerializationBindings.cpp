// torch_emu._C bindings for emu backend metadata (the format tag); the Python
// API around them is torch_emu/serialization.py.
#include <torch/csrc/utils/pybind.h>

#include "core/EmuSerialization.h"

namespace torch_emu {

void init_serialization_bindings(pybind11::module& m) {
  m.def("_get_format_tag", &format_tag);
  m.def("_set_format_tag", &set_format_tag);
  m.def("_copy_backend_meta", &copy_backend_meta);
}

} // namespace torch_emu
