// Native emu kernels: reductions (sum, mean, amax, argmax, all). The
// losses, norms and optimizers of every benchmark model reduce.
#include <ATen/ops/all_native.h>
#include <ATen/ops/amax_native.h>
#include <ATen/ops/argmax_native.h>
#include <ATen/ops/mean_native.h>
#include <ATen/ops/sum_native.h>
#include <torch/library.h>

#include "aten/kernels/EmuKernel.h"

namespace torch_emu {
namespace {

using namespace at::native;
using kernel::Structured;

// LITERALINCLUDE START: MEAN
// CPU's mean is a sum and a division, in a float temporary for half and
// bfloat16 that impl() assigns to its output argument; for other tensors it
// takes a path with no CPU kernel (mean_stub). So it runs on host aliases, and
// what impl() assigned is copied into the real output.
struct MeanOnHost : structured_mean_out {
  void impl(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, std::optional<at::ScalarType> dtype,
            const at::Tensor& out) {
    at::Tensor result = out;
    structured_mean_out::impl(self, dim, keepdim, dtype, result);
    if (!result.is_same(out)) {
      out.copy_(result);
    }
  }
};
// LITERALINCLUDE END: MEAN

} // namespace

template <>
inline constexpr bool kernel::cpu_path_on_cpu_tensors_only<MeanOnHost> = true;
// sum's float accumulation buffer for some strided bfloat16/float16 inputs (EmuKernel.h).
template <>
inline constexpr bool kernel::cpu_path_in_low_precision<structured_sum_out> = true;

void register_reduction_kernels(torch::Library& m) {
  m.impl("sum.dim_IntList", TORCH_FN(Structured<structured_sum_out>::functional));
  m.impl("amax", TORCH_FN(Structured<structured_amax_out>::functional));
  m.impl("argmax", TORCH_FN(Structured<structured_argmax_out>::functional));
  m.impl("mean.dim", TORCH_FN(Structured<MeanOnHost>::functional));
  m.impl("all", TORCH_FN(Structured<structured_all_all_out>::functional));
  m.impl("all.dim", TORCH_FN(Structured<structured_all_out>::functional));
}

} // namespace torch_emu
