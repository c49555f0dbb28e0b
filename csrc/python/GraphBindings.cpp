// The two graph helpers torch.emu needs beyond torch._C._acceleratorGraph
// (torch_emu/emu/graphs.py).
#include <torch/csrc/utils/pybind.h>

#include <tuple>

#include "core/EmuGraph.h"
#include "core/EmuStream.h"

namespace torch_emu {

void init_graph_bindings(pybind11::module& m) {
  m.def("_is_current_stream_capturing", [] { return is_capturing(current_stream()); });
  m.def("_graph_pool_handle", [] {
    const c10::MempoolId_t id = graph_pool_handle();
    return std::make_tuple(id.first, id.second);
  });
}

} // namespace torch_emu
