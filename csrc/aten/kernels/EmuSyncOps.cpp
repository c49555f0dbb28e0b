// Operators whose output size depends on the data (nonzero, masked_select,
// unique...): on an asynchronous device the host must wait for the kernel to
// know how much to allocate, so the sync debug mode reports them, as CUDA's
// does. They still run through the fallback (CPU's kernel on device memory).
#include <torch/library.h>

#include "aten/EmuFallback.h"
#include "core/EmuSyncDebug.h"

namespace torch_emu {
namespace {

// LITERALINCLUDE START: SYNC_OPS
void data_dependent_output(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  warn_or_error_on_sync(op.schema().name().c_str());
  emu_fallback(op, keys, stack);
}

// x[mask]: a boolean (or uint8) index is turned into positions by nonzero.
void index_with_mask(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  for (const c10::IValue& index : stack->back().toListRef()) {
    if (index.isTensor() && (index.toTensor().scalar_type() == at::kBool || index.toTensor().scalar_type() == at::kByte)) {
      warn_or_error_on_sync("aten::index with a boolean mask");
      break;
    }
  }
  emu_fallback(op, keys, stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&data_dependent_output>());
  }
  m.impl("index.Tensor", torch::CppFunction::makeFromBoxedFunction<&index_with_mask>());
}
// LITERALINCLUDE END: SYNC_OPS

} // namespace
} // namespace torch_emu
