// Native emu kernels: reductions (sum, amax, argmax, all). The
// losses, norms and optimizers of every benchmark model reduce.
#include <ATen/ops/all_native.h>
#include <ATen/ops/amax_native.h>
#include <ATen/ops/argmax_native.h>
#include <ATen/ops/sum_native.h>
#include <torch/library.h>

#include "aten/kernels/EmuKernel.h"

namespace torch_emu {
namespace {

using namespace at::native;
using kernel::Structured;

} // namespace

void register_reduction_kernels(torch::Library& m) {
  m.impl("sum.dim_IntList", TORCH_FN(Structured<structured_sum_out>::functional));
  m.impl("amax", TORCH_FN(Structured<structured_amax_out>::functional));
  m.impl("argmax", TORCH_FN(Structured<structured_argmax_out>::functional));
  // (mean stays with the fallback: its device-generic impl() takes a path
  // without a CPU kernel when the tensor is not on CPU.)
  m.impl("all", TORCH_FN(Structured<structured_all_all_out>::functional));
  m.impl("all.dim", TORCH_FN(Structured<structured_all_out>::functional));
}

} // namespace torch_emu
