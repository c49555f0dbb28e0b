// Native emu kernels: elementwise arithmetic, comparisons, pointwise math and
// activations (forward and backward). Chosen by profiling the benchmark
// models (benchmarks/bench_ops.py --profile): these run on every tensor of
// every training step. See EmuKernel.h for how a kernel is made.
#include <ATen/Dispatch.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/ops/abs_native.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/arange_native.h>
#include <ATen/ops/addcdiv_native.h>
#include <ATen/ops/addcmul_native.h>
#include <ATen/ops/clamp_min_native.h>
#include <ATen/ops/clamp_native.h>
#include <ATen/ops/cos_native.h>
#include <ATen/ops/div_native.h>
#include <ATen/ops/eq_native.h>
#include <ATen/ops/exp_native.h>
#include <ATen/ops/fill_native.h>
#include <ATen/ops/ge_native.h>
#include <ATen/ops/gelu_backward_native.h>
#include <ATen/ops/gelu_native.h>
#include <ATen/ops/gt_native.h>
#include <ATen/ops/isneginf_native.h>
#include <ATen/ops/isposinf_native.h>
#include <ATen/ops/le_native.h>
#include <ATen/ops/lerp_native.h>
#include <ATen/ops/log_native.h>
#include <ATen/ops/lt_native.h>
#include <ATen/ops/maximum_native.h>
#include <ATen/ops/minimum_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/ne_native.h>
#include <ATen/ops/neg_native.h>
#include <ATen/ops/reciprocal_native.h>
#include <ATen/ops/relu_native.h>
#include <ATen/ops/rsqrt_native.h>
#include <ATen/ops/sigmoid_backward_native.h>
#include <ATen/ops/sigmoid_native.h>
#include <ATen/ops/silu_backward_native.h>
#include <ATen/ops/silu_native.h>
#include <ATen/ops/sin_native.h>
#include <ATen/ops/sqrt_native.h>
#include <ATen/ops/sub_native.h>
#include <ATen/ops/tanh_backward_native.h>
#include <ATen/ops/tanh_native.h>
#include <ATen/ops/threshold_backward_native.h>
#include <ATen/ops/tril_native.h>
#include <ATen/ops/triu_native.h>
#include <ATen/ops/where_native.h>
#include <ATen/ops/zero_native.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/Fill.h>
#include <torch/library.h>

#include <cstring>

#include "aten/kernels/EmuKernel.h"
#include "core/EmuKernelContext.h"

namespace torch_emu {

// gelu's CPU kernel takes oneDNN's erf for CPU float/bfloat16 tensors and
// ATen's own (rounding differently) for others: on host aliases it is CPU's.
template <>
inline constexpr bool kernel::cpu_path_on_cpu_tensors_only<at::native::structured_gelu_out_cpu> = true;
template <>
inline constexpr bool kernel::cpu_path_on_cpu_tensors_only<at::native::structured_gelu_backward_out_cpu> = true;

namespace {

using namespace at::native;
using kernel::OnDevice;
using kernel::Structured;

// The .Scalar overloads of comparisons and mul: the Python number becomes a
// wrapped-number tensor, as in the ops' own CPU code, but early enough for the
// kernel to give it the tensor's dtype (else CPU's kernel would need the
// iterator's conversion, which only a CPU iterator does; see EmuKernel.h).
template <typename TensorOverload>
at::Tensor scalar_overload(const at::Tensor& self, const at::Scalar& other) {
  return Structured<TensorOverload>::functional(self, at::native::wrapped_scalar_tensor(other));
}
template <typename TensorOverload>
at::Tensor& scalar_overload_(at::Tensor& self, const at::Scalar& other) {
  return Structured<TensorOverload>::inplace(self, at::native::wrapped_scalar_tensor(other));
}

// zero_ of a dense tensor is a memset, as on CPU (where zero_ does the same
// for small tensors before falling back to fill_).
at::Tensor& zero_(at::Tensor& self) {
  if (!self.is_non_overlapping_and_dense()) {
    return at::native::zero_(self);
  }
  kernel::queue_on(
      kernel::common_device(self), [&] { std::memset(self.data_ptr(), 0, self.nbytes()); },
      [&]() -> std::function<void()> { return [self = kernel::keep(self)] { std::memset(self.data_ptr(), 0, self.nbytes()); }; },
      "zero_", self.nbytes());
  return self;
}

// fill_ (torch.ones, full, new_ones...) is at::native::fill_, device-generic:
// it builds an iterator over the output on the host and calls fill_stub with
// the device's type. Emu's slot queues CPU's fill of that output; the closure
// that owns the output rebuilds the iterator (for the queue and graph replay).
// The registration examples replace the slot with a loop of their own.
void fill_output(const at::Tensor& out, const at::Scalar& value) {
  auto iter = at::TensorIteratorConfig()
                  .set_check_mem_overlap(false)
                  .check_all_same_dtype(false)
                  .add_output(out)
                  .resize_outputs(false)
                  .build();
  at::native::fill_stub(c10::DeviceType::CPU, iter, value);
}

} // namespace

// fill_: the value is converted to the tensor's dtype here, on the host, as
// CUDA's fill_ does before its launch, so that an overflow raises at the call
// in every launch mode (not from a queued kernel at a later call). One element
// inside a running kernel (a reduction's CPU code sets its output with fill_
// before accumulating) is then a store, as CPU's fill_ of a one-element CPU
// tensor is, not an iterator built for it (a quarter of an 8x8 sum's cost).
at::Tensor& fill_(at::Tensor& self, const at::Scalar& value) {
  const bool store = self.numel() == 1 && kernel_device() == self.device().index();
  AT_DISPATCH_V2(self.scalar_type(), "fill_", AT_WRAP([&] {
                   const auto converted = value.to<scalar_t>();
                   if (store) {
                     *self.mutable_data_ptr<scalar_t>() = converted;
                   }
                 }),
                 at::kComplexHalf, at::kHalf, at::kBool, at::kBFloat16, AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX),
                 AT_EXPAND(AT_FLOAT8_TYPES), AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  return store ? self : at::native::fill_(self, value);
}

void fill_queued(at::TensorIterator& iter, const c10::Scalar& value) {
  const at::Tensor& out = iter.tensor(0);
  kernel::queue_on(
      kernel::common_device(out), [&] { at::native::fill_stub(c10::DeviceType::CPU, iter, value); },
      [&]() -> std::function<void()> { return [out = kernel::keep(out), value] { fill_output(out, value); }; },
      "fill_", out.nbytes());
}

namespace {

// arange(start, end, step, out=) (torch.arange, position ids): the host makes
// CPU's checks, works out the length with CPU's formula and resizes out as
// CPU's arange_out does, warning as it does; a queued kernel fills out with
// CPU's code, which then finds it the right size.
at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step, at::Tensor& out) {
  const c10::DeviceIndex device = kernel::common_device(out);
  int64_t length = 0;
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "arange_cpu", [&] {
    length = at::native::compute_arange_size<scalar_t>(start, end, step);
  });
  const c10::DeviceGuard guard(out.device());
  if (out.numel() != length) {
    if (out.numel() > 0) {
      TORCH_WARN("The number of elements in the out tensor of shape ", out.sizes(), " is ", out.numel(),
                 " which does not match the computed number of elements ", length,
                 ". Note that this may occur as a result of rounding error. "
                 "The out tensor will be resized to a tensor of shape (", length, ",).");
    }
    out.resize_({length});
  }
  kernel::queue_on(
      device, [&] { at::native::arange_out(start, end, step, out); },
      [&]() -> std::function<void()> {
        return [start, end, step, out = kernel::keep(out)]() mutable { at::native::arange_out(start, end, step, out); };
      },
      "arange", out.nbytes());
  return out;
}

// LITERALINCLUDE START: ELEMENTWISE_REGISTER
// Registers the functional and in-place forms of a structured op.
#define EMU_STRUCTURED(m, name, overload, cls)             \
  m.impl(name overload, TORCH_FN(Structured<cls>::functional)); \
  m.impl(name "_" overload, TORCH_FN(Structured<cls>::inplace))
#define EMU_SCALAR_OVERLOAD(m, name, cls)                      \
  m.impl(name ".Scalar", TORCH_FN(scalar_overload<cls>)); \
  m.impl(name "_.Scalar", TORCH_FN(scalar_overload_<cls>))

} // namespace

void register_elementwise_kernels(torch::Library& m) {
  EMU_STRUCTURED(m, "add", ".Tensor", structured_ufunc_add_CPU);
  EMU_STRUCTURED(m, "sub", ".Tensor", structured_sub_out);
  EMU_STRUCTURED(m, "mul", ".Tensor", structured_mul_out);
  EMU_SCALAR_OVERLOAD(m, "mul", structured_mul_out);
  EMU_STRUCTURED(m, "div", ".Tensor", structured_div_out);
  EMU_STRUCTURED(m, "div", ".Tensor_mode", structured_div_out_mode);
  m.impl("maximum", TORCH_FN(Structured<structured_maximum_out>::functional));
  m.impl("minimum", TORCH_FN(Structured<structured_minimum_out>::functional));
  EMU_STRUCTURED(m, "addcmul", "", structured_addcmul_out);
  EMU_STRUCTURED(m, "addcdiv", "", structured_addcdiv_out);
  EMU_STRUCTURED(m, "lerp", ".Scalar", structured_lerp_Scalar);
  EMU_STRUCTURED(m, "lerp", ".Tensor", structured_lerp_Tensor);
  EMU_STRUCTURED(m, "clamp", "", structured_clamp_out);
  EMU_STRUCTURED(m, "clamp_min", "", structured_clamp_min_out);
  EMU_STRUCTURED(m, "eq", ".Tensor", structured_eq_Tensor_out);
  EMU_SCALAR_OVERLOAD(m, "eq", structured_eq_Tensor_out);
  EMU_STRUCTURED(m, "ne", ".Tensor", structured_ne_Tensor_out);
  EMU_SCALAR_OVERLOAD(m, "ne", structured_ne_Tensor_out);
  EMU_STRUCTURED(m, "lt", ".Tensor", structured_lt_Tensor_out);
  EMU_SCALAR_OVERLOAD(m, "lt", structured_lt_Tensor_out);
  EMU_STRUCTURED(m, "le", ".Tensor", structured_le_Tensor_out);
  EMU_SCALAR_OVERLOAD(m, "le", structured_le_Tensor_out);
  EMU_STRUCTURED(m, "gt", ".Tensor", structured_gt_Tensor_out);
  EMU_SCALAR_OVERLOAD(m, "gt", structured_gt_Tensor_out);
  EMU_STRUCTURED(m, "ge", ".Tensor", structured_ge_Tensor_out);
  EMU_SCALAR_OVERLOAD(m, "ge", structured_ge_Tensor_out);
  EMU_STRUCTURED(m, "sqrt", "", structured_sqrt_out);
  EMU_STRUCTURED(m, "rsqrt", "", structured_rsqrt_out);
  EMU_STRUCTURED(m, "exp", "", structured_exp_out);
  EMU_STRUCTURED(m, "log", "", structured_log_out);
  EMU_STRUCTURED(m, "neg", "", structured_neg_out);
  EMU_STRUCTURED(m, "reciprocal", "", structured_reciprocal_out);
  EMU_STRUCTURED(m, "sigmoid", "", structured_sigmoid_out);
  EMU_STRUCTURED(m, "tanh", "", structured_tanh_out);
  EMU_STRUCTURED(m, "silu", "", structured_silu_out);
  EMU_STRUCTURED(m, "cos", "", structured_cos_out); // rotary embeddings
  EMU_STRUCTURED(m, "sin", "", structured_sin_out);
  m.impl("isneginf", TORCH_FN(Structured<structured_isneginf_out>::functional));
  m.impl("isposinf", TORCH_FN(Structured<structured_isposinf_out>::functional));
  EMU_STRUCTURED(m, "tril", "", structured_tril_cpu); // causal masks
  EMU_STRUCTURED(m, "triu", "", structured_triu_cpu);
  m.impl("gelu", TORCH_FN(Structured<structured_gelu_out_cpu>::functional));
  m.impl("gelu_", TORCH_FN(Structured<structured_gelu_out_cpu>::inplace));
  m.impl("sigmoid_backward", TORCH_FN(Structured<structured_sigmoid_backward_out>::functional));
  m.impl("tanh_backward", TORCH_FN(Structured<structured_tanh_backward_out>::functional));
  m.impl("silu_backward", TORCH_FN(Structured<structured_silu_backward_out>::functional));
  m.impl("gelu_backward", TORCH_FN(Structured<structured_gelu_backward_out_cpu>::functional));
  m.impl("threshold_backward", TORCH_FN(Structured<structured_threshold_backward_out>::functional));
  // Device-generic functions that only call other (native) ops.
  m.impl("relu", TORCH_FN(relu));
  m.impl("relu_", TORCH_FN(relu_));
  m.impl("zero_", TORCH_FN(torch_emu::zero_));
  m.impl("fill_.Scalar", TORCH_FN(torch_emu::fill_));
  m.impl("abs.out", TORCH_FN(at::native::abs_out));  // abs_stub: EmuCpuStubs.cpp
  m.impl("arange.start_out", TORCH_FN(arange_out));
  // where() checks and converts its arguments, sizes its output and builds
  // its iterator on the host, as on CUDA; its stub's kernel is queued
  // (EmuCpuStubs.cpp).
  m.impl("where.self",
         TORCH_FN(static_cast<at::Tensor (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&)>(where)));
  m.impl("where.self_out", TORCH_FN(where_self_out));
}
// LITERALINCLUDE END: ELEMENTWISE_REGISTER

} // namespace torch_emu

// The macro names the stub unqualified, so it is used in the stubs' namespace.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(fill_stub, &torch_emu::fill_queued)
} // namespace at::native
