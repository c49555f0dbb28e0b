// Native emu kernels: the _foreach_* ops PyTorch's optimizers use by default
// on accelerators (Adam, AdamW, SGD with foreach=True) and gradient clipping.
// CPU's per-tensor loops of the in-place forms run as one launch; the
// per-tensor ops they call are native emu kernels that run inside it.
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_norm_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/_foreach_sub_native.h>
#include <ATen/ops/_foreach_zero_native.h>
#include <torch/library.h>

#include "aten/kernels/EmuKernel.h"

namespace torch_emu {
namespace {

using namespace at::native;
using kernel::OnDevice;

// LITERALINCLUDE START: FOREACH_CHECKED
// CPU's loop checks each per-tensor op's arguments (shapes, broadcasting,
// dtypes, overlap) as it reaches it; inside one queued launch a bad argument
// would only be reported at the next sync, where CPU and CUDA raise at the
// call. So the loop is one queued launch only when the host sees at a glance
// that every check passes: every list and scalar list as long as `self`; at
// each index, tensors of self's shape and dtype, a floating or complex one;
// self dense and not partly overlapping them; no complex scalar for a real
// tensor. Otherwise the host runs the loop itself: each per-tensor op is then
// a launch of its own, which checks its arguments at the call.
struct PassesChecks {
  at::TensorList self;
  bool passes = true;
  bool self_complex = true; // every tensor of self complex: a complex scalar fits

  void visit(at::TensorList list) {
    if (self.empty()) {
      self = list;
      for (const at::Tensor& t : self) {
        passes = passes && (t.is_floating_point() || t.is_complex()) && t.is_non_overlapping_and_dense();
        self_complex = self_complex && t.is_complex();
      }
      return;
    }
    passes = passes && list.size() == self.size();
    for (size_t i = 0; passes && i < list.size(); ++i) {
      passes = list[i].sizes() == self[i].sizes() && list[i].scalar_type() == self[i].scalar_type() &&
          at::get_overlap_status(self[i], list[i]) != at::MemOverlapStatus::Partial;
    }
  }
  void visit(const at::Tensor& t) { // a 0-dim tensor used as a scalar
    passes = passes && t.dim() == 0 && (!t.is_complex() || self_complex);
  }
  void visit(const at::Scalar& s) {
    passes = passes && (!s.isComplex() || self_complex);
  }
  void visit(at::ArrayRef<at::Scalar> scalars) {
    passes = passes && scalars.size() == self.size();
    for (const at::Scalar& s : scalars) visit(s);
  }
  template <typename T>
  void visit(const T&) {}
};

template <auto fn>
struct Foreach;

template <typename... Args, void (*fn)(Args...)>
struct Foreach<fn> {
  static void call(Args... args) {
    PassesChecks check;
    (check.visit(args), ...);
    if (check.passes) {
      OnDevice<fn>::call(std::forward<Args>(args)...);
    } else {
      fn(std::forward<Args>(args)...);
    }
  }
};
// LITERALINCLUDE END: FOREACH_CHECKED

// LITERALINCLUDE START: FOREACH_REGISTER
// _foreach_<op>_.<overload> from CPU's kernel: one queued launch runs its
// loop over the tensors (Foreach above). The functional _foreach_<op>.<overload>
// keeps PyTorch's device-generic kernel, which makes each output with the
// per-tensor op (CPU's kernel does the same): those ops queue, where one
// launch that allocates its outputs would have to wait.
#define EMU_FOREACH(m, op, overload, fn) m.impl("_foreach_" op "_" overload, TORCH_FN(Foreach<&fn##_>::call))

} // namespace

void register_foreach_kernels(torch::Library& m) {
  EMU_FOREACH(m, "add", ".Scalar", foreach_tensor_add_scalar_kernel_slow);
  EMU_FOREACH(m, "add", ".List", foreach_tensor_add_list_kernel_slow);
  EMU_FOREACH(m, "add", ".ScalarList", foreach_tensor_add_scalarlist_kernel_slow);
  EMU_FOREACH(m, "add", ".Tensor", foreach_tensor_add_tensor_kernel_slow);
  EMU_FOREACH(m, "sub", ".Scalar", foreach_tensor_sub_scalar_kernel_slow);
  EMU_FOREACH(m, "sub", ".List", foreach_tensor_sub_list_kernel_slow);
  EMU_FOREACH(m, "mul", ".Scalar", foreach_tensor_mul_scalar_kernel_slow);
  EMU_FOREACH(m, "mul", ".List", foreach_tensor_mul_list_kernel_slow);
  EMU_FOREACH(m, "mul", ".ScalarList", foreach_tensor_mul_scalarlist_kernel_slow);
  EMU_FOREACH(m, "mul", ".Tensor", foreach_tensor_mul_tensor_kernel_slow);
  EMU_FOREACH(m, "div", ".Scalar", foreach_tensor_div_scalar_kernel_slow);
  EMU_FOREACH(m, "div", ".List", foreach_tensor_div_list_kernel_slow);
  EMU_FOREACH(m, "div", ".ScalarList", foreach_tensor_div_scalarlist_kernel_slow);
  EMU_FOREACH(m, "div", ".Tensor", foreach_tensor_div_tensor_kernel_slow);
  EMU_FOREACH(m, "lerp", ".Scalar", foreach_tensor_lerp_list_kernel_slow);
  EMU_FOREACH(m, "lerp", ".List", foreach_tensor_ternary_lerp_slow);
  EMU_FOREACH(m, "addcmul", ".Scalar", foreach_tensor_addcmul_scalar_slow);
  EMU_FOREACH(m, "addcmul", ".ScalarList", foreach_tensor_addcmul_scalarlist_slow);
  EMU_FOREACH(m, "addcmul", ".Tensor", foreach_tensor_addcmul_tensor_slow);
  EMU_FOREACH(m, "addcdiv", ".Scalar", foreach_tensor_addcdiv_scalar_slow);
  EMU_FOREACH(m, "addcdiv", ".ScalarList", foreach_tensor_addcdiv_scalarlist_slow);
  EMU_FOREACH(m, "addcdiv", ".Tensor", foreach_tensor_addcdiv_tensor_slow);
  EMU_FOREACH(m, "sqrt", "", foreach_tensor_sqrt_slow);
  m.impl("_foreach_norm.Scalar", TORCH_FN(OnDevice<&foreach_tensor_norm_slow>::call));
  m.impl("_foreach_zero_", TORCH_FN(OnDevice<&foreach_tensor_zero_slow_>::call));
}
// LITERALINCLUDE END: FOREACH_REGISTER

} // namespace torch_emu
