// Native emu kernels: the matrix products behind nn.Linear, attention and
// their backward (most of the time of the MLP and transformer steps).
#include <ATen/ops/addmm_native.h>
#include <ATen/ops/baddbmm_native.h>
#include <ATen/ops/bmm_native.h>
#include <ATen/ops/mm_native.h>
#include <torch/library.h>

#include "aten/kernels/EmuKernel.h"

namespace torch_emu {

// bmm and baddbmm in bfloat16/float16 go to oneDNN on host aliases (EmuKernel.h).
template <>
inline constexpr bool kernel::cpu_path_in_low_precision<at::native::structured_bmm_out_cpu> = true;
template <>
inline constexpr bool kernel::cpu_path_in_low_precision<at::native::structured_baddbmm_out_cpu> = true;

// Their dtype checks are in impl(): a stand-in run raises them at the call (EmuKernel.h).
template <>
inline constexpr bool kernel::stand_in_errors_are_real<at::native::structured_mm_out_cpu> = true;
template <>
inline constexpr bool kernel::stand_in_errors_are_real<at::native::structured_bmm_out_cpu> = true;
template <>
inline constexpr bool kernel::stand_in_errors_are_real<at::native::structured_addmm_out_cpu> = true;
template <>
inline constexpr bool kernel::stand_in_errors_are_real<at::native::structured_baddbmm_out_cpu> = true;

namespace {

using namespace at::native;
using kernel::Structured;

} // namespace

void register_matmul_kernels(torch::Library& m) {
  m.impl("mm", TORCH_FN(Structured<structured_mm_out_cpu>::functional));
  m.impl("bmm", TORCH_FN(Structured<structured_bmm_out_cpu>::functional));
  m.impl("addmm", TORCH_FN(Structured<structured_addmm_out_cpu>::functional));
  m.impl("addmm_", TORCH_FN(Structured<structured_addmm_out_cpu>::inplace));
  m.impl("baddbmm", TORCH_FN(Structured<structured_baddbmm_out_cpu>::functional));
  m.impl("baddbmm_", TORCH_FN(Structured<structured_baddbmm_out_cpu>::inplace));
  // The forms Inductor's generated code calls (extern_kernels.mm(..., out=buf)).
  m.impl("mm.out", TORCH_FN(Structured<structured_mm_out_cpu>::out));
  m.impl("bmm.out", TORCH_FN(Structured<structured_bmm_out_cpu>::out));
  m.impl("addmm.out", TORCH_FN(Structured<structured_addmm_out_cpu>::out));
  m.impl("baddbmm.out", TORCH_FN(Structured<structured_baddbmm_out_cpu>::out));
}

} // namespace torch_emu
