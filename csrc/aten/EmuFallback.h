// The global fallback (EmuFallback.cpp), for the other files that register it
// for a dispatch key of their own (EmuQuantized.cpp: QuantizedPrivateUse1).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_emu {

// LITERALINCLUDE START: FALLBACK_FOR_KEY
// Runs `op` as the fallback does: the CPU kernel registered for `cpu_key`
// (CPU, or QuantizedCPU for quantized tensors) on host aliases of the emu
// tensors, as one kernel on the current stream; results become emu tensors.
void emu_fallback_to(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DispatchKey cpu_key);

// The same as a boxed kernel to register (makeFromBoxedFunction).
template <c10::DispatchKey cpu_key>
void emu_fallback_for(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  emu_fallback_to(op, stack, cpu_key);
}
// LITERALINCLUDE END: FALLBACK_FOR_KEY

} // namespace torch_emu
