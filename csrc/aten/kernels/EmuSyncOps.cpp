// Operators whose output size depends on the data (nonzero, masked_select,
// unique...): on an asynchronous device the host must wait for the kernel to
// know how much to allocate, so the sync debug mode reports them, as CUDA's
// does. They still run through the fallback (CPU's kernel on device memory).
// index.Tensor is registered here for its boolean masks.
#include <torch/library.h>

#include "aten/EmuFallback.h"
#include "aten/kernels/EmuNativeKernels.h"
#include "core/EmuSyncDebug.h"

namespace torch_emu {
namespace {

// LITERALINCLUDE START: SYNC_OPS
void data_dependent_output(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  warn_or_error_on_sync(op.schema().name().c_str());
  emu_fallback(op, keys, stack);
}

// x[mask]: a boolean (or uint8) index is turned into positions by nonzero.
// Integer indices alone need no data for the result's shape: a native kernel
// (EmuIndexingKernels.cpp) when the native kernels are on.
void index(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  for (const c10::IValue& index : stack->back().toListRef()) {
    if (index.isTensor() && (index.toTensor().scalar_type() == at::kBool || index.toTensor().scalar_type() == at::kByte)) {
      warn_or_error_on_sync("aten::index with a boolean mask");
      emu_fallback(op, keys, stack);
      return;
    }
  }
  const at::Tensor self = (*stack)[stack->size() - 2].toTensor();
  const c10::List<std::optional<at::Tensor>> indices = stack->back().toOptionalTensorList();
  if (!indexes_with_integers(self, indices)) {
    emu_fallback(op, keys, stack);
    return;
  }
  at::Tensor result = index_with_integers(self, indices);
  torch::jit::drop(*stack, 2);
  torch::jit::push(*stack, std::move(result));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&data_dependent_output>());
  }
  m.impl("index.Tensor", torch::CppFunction::makeFromBoxedFunction<&index>());
}
// LITERALINCLUDE END: SYNC_OPS

} // namespace
} // namespace torch_emu
