// pow on emu: CPU's structured kernels, and pow in ComplexHalf, which CUDA
// has (its kernel computes in complex64 and rounds) and CPU's kernels have
// not ('"pow" not implemented for 'ComplexHalf''). Emu computes a ComplexHalf
// pow as CUDA does, with emu ops in complex64, so it queues, is captured by
// graphs and checks its arguments at the call like any op.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/stack.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/pow_native.h>
#include <torch/library.h>

#include "aten/EmuFallback.h"
#include "aten/kernels/EmuKernel.h"

namespace torch_emu {
namespace {

using at::Scalar;
using at::Tensor;
using kernel::Structured;

// LITERALINCLUDE START: COMPLEX_HALF_POW
// Only a Half or ComplexHalf operand can make a ComplexHalf result: the one
// dtype test every pow pays before the usual kernel.
bool may_be_complex_half(const Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kComplexHalf;
}
bool may_be_complex_half(const Scalar&) {
  return false;
}
template <typename B, typename E>
bool in_complex_half(const B& base, const E& exponent) {
  return (may_be_complex_half(base) || may_be_complex_half(exponent)) &&
      at::result_type(base, exponent) == at::kComplexHalf;
}

// The operands in complex64; a Python number as base becomes what CPU's
// pow.Scalar makes of it, a 0-dim host tensor, so the pow is a native kernel.
Tensor widened(const Tensor& t) {
  return t.to(at::kComplexFloat);
}
const Scalar& widened(const Scalar& exponent) {
  return exponent;
}
Tensor widened_base(const Scalar& base) {
  return widened(at::scalar_to_tensor(base));
}
Tensor widened_base(const Tensor& base) {
  return widened(base);
}

template <typename B, typename E>
Tensor complex_half_pow(const B& base, const E& exponent) {
  return at::pow(widened_base(base), widened(exponent)).to(at::kComplexHalf);
}

// Into `out` (self, in place), with what a structured op's iterator checks of
// an output: its device, that the result's dtype casts to it, its shape in
// place, no overlap with itself or, partly, with an input.
void no_partial_overlap(const Tensor& out, const Tensor& input) {
  at::assert_no_partial_overlap(out, input);
}
void no_partial_overlap(const Tensor&, const Scalar&) {}

template <typename B, typename E>
Tensor& complex_half_pow_into(const B& base, const E& exponent, Tensor& out, bool in_place) {
  Tensor result = complex_half_pow(base, exponent);
  TORCH_CHECK(out.device() == result.device(), "Expected out tensor to have device ", result.device(),
              ", but got ", out.device(), " instead");
  TORCH_CHECK(at::canCast(result.scalar_type(), out.scalar_type()), "result type ", result.scalar_type(),
              " can't be cast to the desired output type ", out.scalar_type());
  TORCH_CHECK(!in_place || result.sizes() == out.sizes(), "output with shape ", out.sizes(),
              " doesn't match the broadcast shape ", result.sizes());
  at::assert_no_internal_overlap(out);
  no_partial_overlap(out, base);
  no_partial_overlap(out, exponent);
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}
// LITERALINCLUDE END: COMPLEX_HALF_POW

// The forms with a native kernel: CPU's structured kernel, but in ComplexHalf.
Tensor pow_tensor_tensor(const Tensor& self, const Tensor& exponent) {
  if (in_complex_half(self, exponent)) return complex_half_pow(self, exponent);
  return Structured<at::native::structured_pow_Tensor_Tensor_out>::functional(self, exponent);
}
Tensor& pow_tensor_tensor_(Tensor& self, const Tensor& exponent) {
  if (in_complex_half(self, exponent)) return complex_half_pow_into(self, exponent, self, /*in_place=*/true);
  return Structured<at::native::structured_pow_Tensor_Tensor_out>::inplace(self, exponent);
}
Tensor pow_tensor_scalar(const Tensor& self, const Scalar& exponent) {
  if (in_complex_half(self, exponent)) return complex_half_pow(self, exponent);
  return Structured<at::native::structured_pow_Tensor_Scalar_out>::functional(self, exponent);
}
Tensor& pow_tensor_scalar_(Tensor& self, const Scalar& exponent) {
  if (in_complex_half(self, exponent)) return complex_half_pow_into(self, exponent, self, /*in_place=*/true);
  return Structured<at::native::structured_pow_Tensor_Scalar_out>::inplace(self, exponent);
}

// The forms without one (a Python number as base, out=): the fallback, but
// in ComplexHalf. On the stack: base, exponent, then out for an out= form.
template <typename B, typename E>
bool pow_on_stack(const B& base, const E& exponent, size_t arguments, torch::jit::Stack* stack) {
  if (!in_complex_half(base, exponent)) return false;
  Tensor result;
  if (arguments == 3) {
    Tensor out = torch::jit::peek(*stack, 2, arguments).toTensor();
    result = complex_half_pow_into(base, exponent, out, /*in_place=*/false);
  } else {
    result = complex_half_pow(base, exponent);
  }
  torch::jit::drop(*stack, arguments);
  torch::jit::push(*stack, result);
  return true;
}

void pow_boxed(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const size_t arguments = op.schema().arguments().size();
  const c10::IValue& base = torch::jit::peek(*stack, 0, arguments);
  const c10::IValue& exponent = torch::jit::peek(*stack, 1, arguments);
  const bool done = base.isScalar()       ? pow_on_stack(base.toScalar(), exponent.toTensor(), arguments, stack)
                    : exponent.isScalar() ? pow_on_stack(base.toTensor(), exponent.toScalar(), arguments, stack)
                                          : pow_on_stack(base.toTensor(), exponent.toTensor(), arguments, stack);
  if (!done) emu_fallback(op, keys, stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"pow.Scalar", "pow.Scalar_out", "pow.Tensor_Tensor_out", "pow.Tensor_Scalar_out"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&pow_boxed>());
  }
}

} // namespace

void register_pow_kernels(torch::Library& m) {
  m.impl("pow.Tensor_Tensor", TORCH_FN(pow_tensor_tensor));
  m.impl("pow_.Tensor", TORCH_FN(pow_tensor_tensor_));
  m.impl("pow.Tensor_Scalar", TORCH_FN(pow_tensor_scalar));
  m.impl("pow_.Scalar", TORCH_FN(pow_tensor_scalar_));
}

} // namespace torch_emu
