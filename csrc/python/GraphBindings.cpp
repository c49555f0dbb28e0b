// The graph helper torch.emu needs beyond torch._C._acceleratorGraph
// (torch_emu/emu/graphs.py).
#include <torch/csrc/utils/pybind.h>

#include "core/EmuGraph.h"
#include "core/EmuStream.h"

namespace torch_emu {

void init_graph_bindings(pybind11::module& m) {
  m.def("_is_current_stream_capturing", [] { return is_capturing(current_stream()); });
  m.def("_check_no_capture", [](c10::DeviceIndex device) { check_no_capture(device); });
}

} // namespace torch_emu
