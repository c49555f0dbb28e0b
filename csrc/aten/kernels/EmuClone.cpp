// aten::clone for emu: PyTorch's generic clone (empty_like + copy_, a
// device-to-device copy on the current stream), plus the source's backend
// metadata, which the generic clone does not know about.
#include <ATen/ops/clone_native.h>
#include <torch/library.h>

#include "core/EmuSerialization.h"

namespace torch_emu {
namespace {

// LITERALINCLUDE START: EMU_CLONE
at::Tensor emu_clone(const at::Tensor& self, std::optional<c10::MemoryFormat> memory_format) {
  at::Tensor out = at::native::clone(self, memory_format);
  copy_backend_meta(self, out);
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("clone", &emu_clone);
}
// LITERALINCLUDE END: EMU_CLONE

} // namespace
} // namespace torch_emu
