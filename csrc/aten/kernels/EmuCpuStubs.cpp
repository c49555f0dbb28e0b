// Device-generic ATen kernels (the impl() of add, mul, sum, gather...) build a
// TensorIterator and call a DispatchStub with the iterator's device type. When
// a native emu kernel runs them on emu tensors that device type is
// PrivateUse1, so each stub's PrivateUse1 slot forwards to the stub's own CPU
// kernel: emu memory is host memory, the CPU kernel runs on it unchanged.
//
// The stub's CPU lookup is inline code in DispatchStub.h whose arguments
// depend on which CPU capabilities libtorch was built with; setup.py defines
// the same HAVE_*_CPU_DEFINITION macros for this build.
#include <ATen/native/Activation.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/Copy.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/IndexKernel.h>
#include <ATen/native/Lerp.h>
#include <ATen/native/PointwiseOps.h>
#include <ATen/native/RangeFactories.h>
#include <ATen/native/Pow.h>
#include <ATen/native/ReduceOps.h>
#include <ATen/native/TensorAdvancedIndexing.h>
#include <ATen/native/TensorCompare.h>
#include <ATen/native/UnaryOps.h>

#include <utility>

#include "aten/kernels/EmuKernel.h"
#include "core/EmuKernelContext.h"

namespace torch_emu {
namespace {

// LITERALINCLUDE START: STUB_TO_CPU
template <typename Stub, Stub* stub, typename Fn = typename Stub::FnPtr>
struct ToCpu;

// The iterator of a stub that fills one (its first argument) element by
// element, when every operand is emu memory; nullptr otherwise. A reduction
// is left out: queued, it would run on the stream's worker, whose team (one
// thread on two cores) splits its sums otherwise than CPU's.
template <typename First, typename... Rest>
at::TensorIteratorBase* emu_iterator(First& first, Rest&...) {
  if constexpr (std::is_base_of_v<at::TensorIteratorBase, std::decay_t<First>>) {
    if (first.num_reduce_dims() != 0) {
      return nullptr;
    }
    for (int i = 0; i < first.ntensors(); ++i) {
      if (first.device(i).type() != c10::DeviceType::PrivateUse1) {
        return nullptr;
      }
    }
    return &first;
  }
  return nullptr;
}

// What the kernel reads and writes, measured as every other launch measures
// it (kernel::bytes_of): its operands' bytes.
inline size_t iterator_bytes(const at::TensorIteratorBase& iter) {
  size_t bytes = 0;
  for (int i = 0; i < iter.ntensors(); ++i) {
    bytes += kernel::bytes_of(iter.tensor(i));
  }
  return bytes;
}

template <typename Stub, Stub* stub, typename R, typename... Args>
struct ToCpu<Stub, stub, R (*)(Args...)> {
  static R call(Args... args) {
    if (kernel_device() >= 0) { // inside a native kernel: the usual caller
      return (*stub)(c10::DeviceType::CPU, std::forward<Args>(args)...);
    }
    // Device-generic host code called the stub itself (where(), a composite
    // op: ldexp on an integer exponent), as CUDA's host code launches its
    // kernel: a stub that fills an iterator over emu memory is queued on the
    // iterator's device, its copy of the iterator keeping the operands as a
    // queued kernel keeps tensors. Any other (a reduction, an iterator with a
    // host operand, a stub with a result) runs as a kernel that waits, on the
    // current stream after the work queued before it.
    if constexpr (std::is_void_v<R> && sizeof...(Args) > 0) {
      if (at::TensorIteratorBase* iter = emu_iterator(args...)) {
        kernel::queue_on(
            iter->device(0).index(), [&] { (*stub)(c10::DeviceType::CPU, args...); },
            [&] {
              return [kept = std::make_tuple(kernel::keep(args)...)]() mutable {
                std::apply([](auto&... a) { (*stub)(c10::DeviceType::CPU, kernel::borrow(a)...); }, kept);
              };
            },
            kStubKernelName, iterator_bytes(*iter));
        return;
      }
    }
    return kernel::run_on(
        current_device(), [&]() -> R { return (*stub)(c10::DeviceType::CPU, std::forward<Args>(args)...); },
        kernel::NoReplay{}, kStubKernelName);
  }

 private:
  static constexpr const char* kStubKernelName = "a DispatchStub's CPU kernel";
};
// LITERALINCLUDE END: STUB_TO_CPU

// LITERALINCLUDE START: GATHER_EXPANDED_INDEX
// gather along dim 0 with an expanded index (x.gather(0, i[:, None].expand(n,
// m)), how top-k selection and graph networks pick rows) has a CPU kernel of
// its own that copies whole rows. ATen's gather takes it only for CPU
// tensors (its can_use_expanded_index_path checks the device), so on emu
// the general kernel ran, at 64x64 four times CPU's time. Inside an emu
// kernel the stub takes the row kernel under CPU's conditions; the result is
// the same copy either way.
bool gathers_expanded_index(const at::Tensor& result, int64_t dim, const at::Tensor& index,
                            const at::Tensor& self) {
  const at::ScalarType type = result.scalar_type();
  if (dim != 0 || !c10::isFloatingType(type) || type == at::kHalf || result.numel() == 0 ||
      index.numel() == 0 || self.numel() == 0 || result.dim() == 0 || index.dim() == 0 || self.dim() == 0) {
    return false;
  }
  for (int64_t d = 1; d < index.dim(); ++d) {
    if (self.size(d) != index.size(d) || index.stride(d) > 1) {
      return false;
    }
  }
  return index.stride(0) == 1 && self.is_contiguous() && result.is_contiguous();
}

void gather_on_emu(const at::Tensor& result, const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  if (kernel_device() >= 0 && gathers_expanded_index(result, dim, index, self)) {
    at::native::gather_expanded_index_stub(c10::DeviceType::CPU, result, self, index);
    return;
  }
  ToCpu<decltype(at::native::gather_stub), &at::native::gather_stub>::call(result, self, dim, index);
}
// LITERALINCLUDE END: GATHER_EXPANDED_INDEX

} // namespace
} // namespace torch_emu

// The macro names the stub unqualified, so it is used in the stubs' namespace.
#define EMU_STUB_TO_CPU(stub) REGISTER_PRIVATEUSE1_DISPATCH(stub, (&torch_emu::ToCpu<decltype(stub), &stub>::call))

namespace at::native {
// LITERALINCLUDE START: STUB_LIST
// Arithmetic, comparisons and pointwise math with two operands.
EMU_STUB_TO_CPU(add_stub)
EMU_STUB_TO_CPU(add_clamp_stub)
EMU_STUB_TO_CPU(mul_stub)
EMU_STUB_TO_CPU(div_true_stub)
EMU_STUB_TO_CPU(div_floor_stub)
EMU_STUB_TO_CPU(div_trunc_stub)
EMU_STUB_TO_CPU(atan2_stub)
EMU_STUB_TO_CPU(remainder_stub)
EMU_STUB_TO_CPU(bitwise_and_stub)
EMU_STUB_TO_CPU(bitwise_or_stub)
EMU_STUB_TO_CPU(bitwise_xor_stub)
EMU_STUB_TO_CPU(lshift_stub)
EMU_STUB_TO_CPU(rshift_stub)
EMU_STUB_TO_CPU(logical_xor_stub)
EMU_STUB_TO_CPU(logical_and_stub)
EMU_STUB_TO_CPU(logical_or_stub)
EMU_STUB_TO_CPU(lt_stub)
EMU_STUB_TO_CPU(le_stub)
EMU_STUB_TO_CPU(gt_stub)
EMU_STUB_TO_CPU(ge_stub)
EMU_STUB_TO_CPU(eq_stub)
EMU_STUB_TO_CPU(ne_stub)
EMU_STUB_TO_CPU(maximum_stub)
EMU_STUB_TO_CPU(minimum_stub)
EMU_STUB_TO_CPU(fmax_stub)
EMU_STUB_TO_CPU(fmin_stub)
EMU_STUB_TO_CPU(smooth_l1_stub)
EMU_STUB_TO_CPU(huber_stub)
EMU_STUB_TO_CPU(sigmoid_backward_stub)
EMU_STUB_TO_CPU(logit_backward_stub)
EMU_STUB_TO_CPU(tanh_backward_stub)
EMU_STUB_TO_CPU(mse_stub)
EMU_STUB_TO_CPU(fmod_stub)
EMU_STUB_TO_CPU(logaddexp_stub)
EMU_STUB_TO_CPU(logaddexp2_stub)
EMU_STUB_TO_CPU(gcd_stub)
EMU_STUB_TO_CPU(lcm_stub)
EMU_STUB_TO_CPU(hypot_stub)
EMU_STUB_TO_CPU(igamma_stub)
EMU_STUB_TO_CPU(igammac_stub)
EMU_STUB_TO_CPU(nextafter_stub)
EMU_STUB_TO_CPU(heaviside_stub)
EMU_STUB_TO_CPU(copysign_stub)
EMU_STUB_TO_CPU(xlogy_stub)
EMU_STUB_TO_CPU(xlog1py_stub)
EMU_STUB_TO_CPU(zeta_stub)
EMU_STUB_TO_CPU(chebyshev_polynomial_t_stub)
EMU_STUB_TO_CPU(chebyshev_polynomial_u_stub)
EMU_STUB_TO_CPU(chebyshev_polynomial_v_stub)
EMU_STUB_TO_CPU(chebyshev_polynomial_w_stub)
EMU_STUB_TO_CPU(hermite_polynomial_h_stub)
EMU_STUB_TO_CPU(hermite_polynomial_he_stub)
EMU_STUB_TO_CPU(laguerre_polynomial_l_stub)
EMU_STUB_TO_CPU(legendre_polynomial_p_stub)
EMU_STUB_TO_CPU(shifted_chebyshev_polynomial_t_stub)
EMU_STUB_TO_CPU(shifted_chebyshev_polynomial_u_stub)
EMU_STUB_TO_CPU(shifted_chebyshev_polynomial_v_stub)
EMU_STUB_TO_CPU(shifted_chebyshev_polynomial_w_stub)
EMU_STUB_TO_CPU(ldexp_stub)
// Pointwise math with one operand, and the random fills (the generator
// argument is already CPU's, see EmuKernel.h).
EMU_STUB_TO_CPU(abs_stub)
EMU_STUB_TO_CPU(angle_stub)
EMU_STUB_TO_CPU(conj_physical_stub)
EMU_STUB_TO_CPU(acos_stub)
EMU_STUB_TO_CPU(acosh_stub)
EMU_STUB_TO_CPU(asinh_stub)
EMU_STUB_TO_CPU(atanh_stub)
EMU_STUB_TO_CPU(asin_stub)
EMU_STUB_TO_CPU(atan_stub)
EMU_STUB_TO_CPU(bitwise_not_stub)
EMU_STUB_TO_CPU(logical_not_stub)
EMU_STUB_TO_CPU(ceil_stub)
EMU_STUB_TO_CPU(cos_stub)
EMU_STUB_TO_CPU(cosh_stub)
EMU_STUB_TO_CPU(digamma_stub)
EMU_STUB_TO_CPU(special_entr_stub)
EMU_STUB_TO_CPU(special_erfcx_stub)
EMU_STUB_TO_CPU(erf_stub)
EMU_STUB_TO_CPU(erfc_stub)
EMU_STUB_TO_CPU(erfinv_stub)
EMU_STUB_TO_CPU(exp_stub)
EMU_STUB_TO_CPU(exp2_stub)
EMU_STUB_TO_CPU(expm1_stub)
EMU_STUB_TO_CPU(floor_stub)
EMU_STUB_TO_CPU(frac_stub)
EMU_STUB_TO_CPU(frexp_stub)
EMU_STUB_TO_CPU(i0_stub)
EMU_STUB_TO_CPU(special_i0e_stub)
EMU_STUB_TO_CPU(special_i1_stub)
EMU_STUB_TO_CPU(special_i1e_stub)
EMU_STUB_TO_CPU(log_stub)
EMU_STUB_TO_CPU(log10_stub)
EMU_STUB_TO_CPU(log1p_stub)
EMU_STUB_TO_CPU(log2_stub)
EMU_STUB_TO_CPU(special_ndtri_stub)
EMU_STUB_TO_CPU(special_log_ndtr_stub)
EMU_STUB_TO_CPU(neg_stub)
EMU_STUB_TO_CPU(reciprocal_stub)
EMU_STUB_TO_CPU(round_stub)
EMU_STUB_TO_CPU(rsqrt_stub)
EMU_STUB_TO_CPU(sigmoid_stub)
EMU_STUB_TO_CPU(logit_stub)
EMU_STUB_TO_CPU(sign_stub)
EMU_STUB_TO_CPU(signbit_stub)
EMU_STUB_TO_CPU(sgn_stub)
EMU_STUB_TO_CPU(sin_stub)
EMU_STUB_TO_CPU(sinc_stub)
EMU_STUB_TO_CPU(sinh_stub)
EMU_STUB_TO_CPU(sqrt_stub)
EMU_STUB_TO_CPU(tan_stub)
EMU_STUB_TO_CPU(tanh_stub)
EMU_STUB_TO_CPU(trigamma_stub)
EMU_STUB_TO_CPU(trunc_stub)
EMU_STUB_TO_CPU(lgamma_stub)
EMU_STUB_TO_CPU(special_airy_ai_stub)
EMU_STUB_TO_CPU(special_bessel_j0_stub)
EMU_STUB_TO_CPU(special_bessel_j1_stub)
EMU_STUB_TO_CPU(special_bessel_y0_stub)
EMU_STUB_TO_CPU(special_bessel_y1_stub)
EMU_STUB_TO_CPU(special_modified_bessel_i0_stub)
EMU_STUB_TO_CPU(special_modified_bessel_i1_stub)
EMU_STUB_TO_CPU(special_modified_bessel_k0_stub)
EMU_STUB_TO_CPU(special_modified_bessel_k1_stub)
EMU_STUB_TO_CPU(special_scaled_modified_bessel_k0_stub)
EMU_STUB_TO_CPU(special_scaled_modified_bessel_k1_stub)
EMU_STUB_TO_CPU(special_spherical_bessel_j0_stub)
EMU_STUB_TO_CPU(bernoulli_tensor_stub)
EMU_STUB_TO_CPU(bernoulli_scalar_stub)
EMU_STUB_TO_CPU(cauchy_stub)
EMU_STUB_TO_CPU(exponential_stub)
EMU_STUB_TO_CPU(geometric_stub)
EMU_STUB_TO_CPU(log_normal_stub)
EMU_STUB_TO_CPU(uniform_stub)
EMU_STUB_TO_CPU(normal_stub)
EMU_STUB_TO_CPU(random_from_to_stub)
EMU_STUB_TO_CPU(random_full_64_bits_range_stub)
EMU_STUB_TO_CPU(random_stub)
EMU_STUB_TO_CPU(kaiser_window_stub)
EMU_STUB_TO_CPU(polygamma_stub)
EMU_STUB_TO_CPU(multinomial_with_replacement_stub)
EMU_STUB_TO_CPU(nan_to_num_stub)
EMU_STUB_TO_CPU(round_decimals_stub)
// addcmul, addcdiv and loss backward pointwise kernels.
EMU_STUB_TO_CPU(addcmul_stub)
EMU_STUB_TO_CPU(addcdiv_stub)
EMU_STUB_TO_CPU(smooth_l1_backward_stub)
EMU_STUB_TO_CPU(huber_backward_stub)
EMU_STUB_TO_CPU(mse_backward_stub)
// Activations and their backward.
EMU_STUB_TO_CPU(elu_stub)
EMU_STUB_TO_CPU(elu_backward_stub)
EMU_STUB_TO_CPU(softplus_stub)
EMU_STUB_TO_CPU(softplus_backward_stub)
EMU_STUB_TO_CPU(log_sigmoid_cpu_stub)
EMU_STUB_TO_CPU(log_sigmoid_backward_stub)
EMU_STUB_TO_CPU(threshold_stub)
EMU_STUB_TO_CPU(hardtanh_backward_stub)
EMU_STUB_TO_CPU(hardsigmoid_stub)
EMU_STUB_TO_CPU(hardsigmoid_backward_stub)
EMU_STUB_TO_CPU(hardswish_stub)
EMU_STUB_TO_CPU(hardswish_backward_stub)
EMU_STUB_TO_CPU(hardshrink_stub)
EMU_STUB_TO_CPU(softshrink_stub)
EMU_STUB_TO_CPU(shrink_backward_stub)
EMU_STUB_TO_CPU(leaky_relu_stub)
EMU_STUB_TO_CPU(leaky_relu_backward_stub)
EMU_STUB_TO_CPU(glu_stub)
EMU_STUB_TO_CPU(glu_backward_stub)
EMU_STUB_TO_CPU(glu_jvp_stub)
EMU_STUB_TO_CPU(silu_stub)
EMU_STUB_TO_CPU(silu_backward_stub)
EMU_STUB_TO_CPU(mish_stub)
EMU_STUB_TO_CPU(mish_backward_stub)
EMU_STUB_TO_CPU(prelu_stub)
EMU_STUB_TO_CPU(prelu_backward_stub)
// Reductions and scans (mean_stub has no CPU kernel: CPU's mean is a sum).
EMU_STUB_TO_CPU(sum_stub)
EMU_STUB_TO_CPU(nansum_stub)
EMU_STUB_TO_CPU(prod_stub)
EMU_STUB_TO_CPU(and_stub)
EMU_STUB_TO_CPU(or_stub)
EMU_STUB_TO_CPU(min_values_stub)
EMU_STUB_TO_CPU(max_values_stub)
EMU_STUB_TO_CPU(argmax_stub)
EMU_STUB_TO_CPU(argmin_stub)
EMU_STUB_TO_CPU(xor_sum_stub)
EMU_STUB_TO_CPU(std_var_stub)
EMU_STUB_TO_CPU(norm_stub)
EMU_STUB_TO_CPU(powsum_stub)
EMU_STUB_TO_CPU(cumsum_stub)
EMU_STUB_TO_CPU(cumprod_stub)
EMU_STUB_TO_CPU(logcumsumexp_stub)
EMU_STUB_TO_CPU(aminmax_stub)
EMU_STUB_TO_CPU(aminmax_allreduce_stub)
// Indexing, gather and scatter.
EMU_STUB_TO_CPU(index_put_with_sort_stub)
EMU_STUB_TO_CPU(index_put_with_sort_quantized_stub)
REGISTER_PRIVATEUSE1_DISPATCH(gather_stub, &torch_emu::gather_on_emu)
EMU_STUB_TO_CPU(scatter_stub)
EMU_STUB_TO_CPU(scatter_fill_stub)
EMU_STUB_TO_CPU(scatter_add_stub)
EMU_STUB_TO_CPU(scatter_reduce_stub)
EMU_STUB_TO_CPU(scatter_scalar_reduce_stub)
EMU_STUB_TO_CPU(scatter_reduce_two_stub)
EMU_STUB_TO_CPU(scatter_add_expanded_index_stub)
EMU_STUB_TO_CPU(scatter_reduce_expanded_index_stub)
EMU_STUB_TO_CPU(gather_expanded_index_stub)
// More indexing: index, index_put, masked ops, flip.
EMU_STUB_TO_CPU(index_stub)
EMU_STUB_TO_CPU(index_fill_stub)
EMU_STUB_TO_CPU(index_copy_stub)
EMU_STUB_TO_CPU(index_put_stub)
EMU_STUB_TO_CPU(put_stub)
EMU_STUB_TO_CPU(take_stub)
EMU_STUB_TO_CPU(flip_stub)
EMU_STUB_TO_CPU(masked_fill_stub)
EMU_STUB_TO_CPU(masked_select_serial_stub)
EMU_STUB_TO_CPU(masked_select_stub)
EMU_STUB_TO_CPU(masked_scatter_stub)
// Elementwise kernels outside those headers.
EMU_STUB_TO_CPU(clamp_stub)
EMU_STUB_TO_CPU(clamp_scalar_stub)
EMU_STUB_TO_CPU(clamp_min_scalar_stub)
EMU_STUB_TO_CPU(clamp_max_scalar_stub)
EMU_STUB_TO_CPU(isposinf_stub)
EMU_STUB_TO_CPU(isneginf_stub)
EMU_STUB_TO_CPU(arange_stub)
EMU_STUB_TO_CPU(where_kernel)
EMU_STUB_TO_CPU(lerp_kernel_scalar_weight)
EMU_STUB_TO_CPU(lerp_kernel_tensor_weight)
EMU_STUB_TO_CPU(pow_tensor_tensor_stub)
EMU_STUB_TO_CPU(pow_tensor_scalar_stub)
// Copies inside kernels' CPU code (cat of mixed dtypes...); emu copy_ itself
// is EmuCopy.cpp's.
EMU_STUB_TO_CPU(copy_stub)
// LITERALINCLUDE END: STUB_LIST
} // namespace at::native
