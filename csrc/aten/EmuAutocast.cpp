// Autocast (automatic mixed precision) for emu: the op policies of the
// AutocastPrivateUse1 dispatch key. Emu stands in for a CUDA-like GPU, so it
// uses the same policy lists as CUDA: PyTorch publishes them as X-macros in
// ATen/autocast_mode.h and each backend instantiates them for its own key.
//
// How a call flows: with torch.autocast("emu") active, the dispatcher adds
// AutocastPrivateUse1 to the keys of every op whose inputs are on emu. The
// wrapper registered here casts the floating-point arguments as the policy
// says, excludes the autocast key and redispatches; the cast and the op then
// run on emu as usual (own kernels or the global fallback).
#include <ATen/Operators.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_emu {
namespace {

// LITERALINCLUDE START: AUTOCAST_BANNED
// binary_cross_entropy is not safe in float16 (log of a probability that
// rounds to 0 or 1); like CUDA, autocast refuses it and names the safe op.
at::Tensor binary_cross_entropy_refused(const at::Tensor&, const at::Tensor&,
                                        const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast on emu "
              "(as on CUDA): their inputs are usually the output of a sigmoid, which loses too much precision "
              "in float16/bfloat16. Use torch.nn.functional.binary_cross_entropy_with_logits or "
              "torch.nn.BCEWithLogitsLoss, which combine sigmoid and BCE and are safe to autocast; or compute "
              "this loss outside the autocast region (after .float()).");
}
// LITERALINCLUDE END: AUTOCAST_BANNED

} // namespace

// LITERALINCLUDE START: AUTOCAST_FALLTHROUGH
// Ops without a policy are not touched: the autocast key falls through to
// the next key (autograd, then emu) at no cost.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}
// LITERALINCLUDE END: AUTOCAST_FALLTHROUGH

// LITERALINCLUDE START: AUTOCAST_POLICIES
// One policy per list. Each list macro calls its argument once per op as
// (op) or (op, overload); the helpers below append the policy and expand to
// KERNEL_PRIVATEUSEONE, which registers at::autocast::WrapFunction<policy,
// PrivateUse1, ...> as the op's AutocastPrivateUse1 kernel.
#define EMU_AUTOCAST_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define EMU_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define EMU_AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define EMU_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // The lists spell signatures with ATen's unqualified type names.
  using at::IntArrayRef;
  using at::Scalar;
  using at::ScalarType;
  using at::Tensor;

  // Matmuls, convolutions, linear, RNN cells, attention: run in the autocast
  // dtype (float16 or bfloat16).
  AT_FORALL_LOWER_PRECISION_FP(EMU_AUTOCAST_LOWER_PRECISION)
  // Pointwise functions with a wide range, norms, losses, upsampling: inputs
  // cast up to float32.
  AT_FORALL_FP32(EMU_AUTOCAST_FP32)
  // Reductions and softmax: run in float32 unless the caller passed a dtype.
  AT_FORALL_FP32_SET_OPT_DTYPE(EMU_AUTOCAST_FP32_SET_OPT_DTYPE)
  // norm.Scalar / norm.ScalarOpt_dim: redispatched to the overload with a
  // dtype argument, set to float32.
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  // Multi-input ops: all floating inputs cast to the widest of their dtypes.
  AT_FORALL_PROMOTE(EMU_AUTOCAST_PROMOTE)

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_refused));
}

#undef EMU_AUTOCAST_LOWER_PRECISION
#undef EMU_AUTOCAST_FP32
#undef EMU_AUTOCAST_FP32_SET_OPT_DTYPE
#undef EMU_AUTOCAST_PROMOTE
// LITERALINCLUDE END: AUTOCAST_POLICIES

} // namespace torch_emu
