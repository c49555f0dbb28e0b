// Injected faults for torch.emu.faults (torch_emu/emu/faults.py): thin calls
// into the runtime's fault API (runtime/emu_runtime_faults.h).
#include <torch/csrc/utils/pybind.h>

#include "core/EmuException.h"
#include "runtime/emu_runtime_faults.h"

namespace torch_emu {

void init_fault_bindings(pybind11::module& m) {
  m.def("_fault_inject", [](int kind, int device, uint64_t after, uint64_t times, size_t reserved_limit,
                            const std::string& kernel_name) {
    const emuFaultSpec spec{static_cast<emuFaultKind>(kind), device, after, times, reserved_limit,
                            kernel_name.empty() ? nullptr : kernel_name.c_str()};
    int id = 0;
    EMU_CHECK(emuFaultInject(&spec, &id));
    return id;
  });
  m.def("_fault_remove", [](int id) { EMU_CHECK(emuFaultRemove(id)); });
  m.def("_fault_hits", [](int id) {
    uint64_t hits = 0;
    EMU_CHECK(emuFaultGetHits(id, &hits));
    return hits;
  });
}

} // namespace torch_emu
