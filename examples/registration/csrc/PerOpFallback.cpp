// Scenario 5: per-operator fallbacks.
//
// 1. PyTorch's copying CPU fallback (at::native::cpu_fallback) for one
//    operator, aten::histc: inputs are copied to the host, CPU's kernel runs,
//    results are copied back to the device. It is what a backend whose memory
//    the host cannot address would use; on emu it is the slow path next to the
//    global no-copy fallback (EmuFallback.cpp), kept here to show the pattern.
// 2. A per-operator opt-out: aten::to_mkldnn (conversion to oneDNN's CPU
//    layout) has a CPU kernel, so the global fallback would run it and return
//    an "emu" tensor in a layout emu does not have. It gets a kernel that
//    refuses clearly instead.
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "core/EmuStream.h"

namespace torch_emu {
namespace {

// LITERALINCLUDE START: PER_OP_CPU_FALLBACK
void copying_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // Copies emu -> CPU (a device-to-host memcpy per tensor), runs CPU's
  // kernel, copies the outputs (and mutated inputs) back to emu.
  at::native::cpu_fallback(op, stack);
}
// LITERALINCLUDE END: PER_OP_CPU_FALLBACK

// LITERALINCLUDE START: PER_OP_NOT_IMPLEMENTED
at::Tensor to_mkldnn_refused(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "aten::to_mkldnn is not implemented for emu: mkldnn (oneDNN) tensors are a "
                                     "CPU layout. Move the tensor to the CPU first: x.cpu().to_mkldnn()");
}
// LITERALINCLUDE END: PER_OP_NOT_IMPLEMENTED

} // namespace

// LITERALINCLUDE START: PER_OP_REGISTER
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("histc", torch::CppFunction::makeFromBoxedFunction<&copying_cpu_fallback>());
  m.impl("to_mkldnn", TORCH_FN(to_mkldnn_refused));
}
// LITERALINCLUDE END: PER_OP_REGISTER

} // namespace torch_emu
