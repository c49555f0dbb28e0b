// Native emu kernels: softmax and losses, layer and batch norm, embedding
// backward, max pooling, dropout and CPU's fused attention (forward and
// backward). Each was a top entry of an emu training-step profile.
#include <ATen/TensorUtils.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/native/layer_norm.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_log_softmax_backward_data_native.h>
#include <ATen/ops/_log_softmax_native.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward_native.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_native.h>
#include <ATen/ops/_softmax_backward_data_native.h>
#include <ATen/ops/_softmax_native.h>
#include <ATen/ops/embedding_dense_backward_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/max_pool2d_with_indices_backward_native.h>
#include <ATen/ops/max_pool2d_with_indices_native.h>
#include <ATen/ops/native_batch_norm_backward_native.h>
#include <ATen/ops/native_batch_norm_native.h>
#include <ATen/ops/native_dropout_backward_native.h>
#include <ATen/ops/native_dropout_native.h>
#include <ATen/ops/native_layer_norm_backward_native.h>
#include <ATen/ops/native_layer_norm_native.h>
#include <ATen/ops/nll_loss_backward_native.h>
#include <ATen/ops/nll_loss_forward_native.h>
#include <torch/library.h>

#include "aten/kernels/EmuKernel.h"

namespace torch_emu {
namespace {

using namespace at::native;
using kernel::OnDevice;
using kernel::OnHost;
using kernel::Structured;

// LITERALINCLUDE START: LAYER_NORM
// A contiguous tensor, or an undefined one (an absent weight or bias) as is.
at::Tensor contiguous_if_defined(const at::Tensor& t) {
  return t.defined() ? t.contiguous() : t;
}

// native_layer_norm as CPU computes it (LayerNormKernel), split so that the
// kernel is queued: the host checks the inputs and allocates the outputs as
// layer_norm_cpu does, the queued kernel only fills them.
void layer_norm_kernel(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta, int64_t m, int64_t n,
                       double eps, at::Tensor& y, at::Tensor& mean, at::Tensor& rstd) {
  LayerNormKernel(at::kCPU, x, gamma, beta, m, n, eps, &y, &mean, &rstd);
}

// The statistics' shape: the input's outer dims, then 1 per normalized dim.
c10::DimVector stat_shape(const at::Tensor& input, size_t normalized_dims) {
  c10::DimVector shape(input.sizes().begin(), input.sizes().end());
  std::fill(shape.end() - static_cast<int64_t>(normalized_dims), shape.end(), 1);
  return shape;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(const at::Tensor& input, at::IntArrayRef normalized_shape,
                                                                 const std::optional<at::Tensor>& weight_opt,
                                                                 const std::optional<at::Tensor>& bias_opt, double eps) {
  kernel::common_device(input, weight_opt, bias_opt);
  const at::Tensor weight = weight_opt.value_or(at::Tensor()), bias = bias_opt.value_or(at::Tensor());
  const bool mixed = is_mixed_type(input, weight, bias);
  if (mixed) {
    check_mixed_data_type(input, weight, bias);
  }
  const auto [m, n] = _check_layer_norm_inputs(input, normalized_shape, weight, bias);
  const at::Tensor x = input.contiguous();
  at::Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  const at::TensorOptions stats = x.options().dtype(param_scalar_type(input, mixed));
  at::Tensor mean = at::empty({m}, stats), rstd = at::empty({m}, stats);
  OnDevice<&layer_norm_kernel>::call(x, contiguous_if_defined(weight), contiguous_if_defined(bias), m, n, eps, y,
                                     mean, rstd);
  const c10::DimVector shape = stat_shape(input, normalized_shape.size());
  return {std::move(y), mean.view(shape), rstd.view(shape)};
}

void layer_norm_backward_kernel(const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& mean,
                                const at::Tensor& rstd, const at::Tensor& gamma, int64_t m, int64_t n,
                                at::Tensor& grad_x, at::Tensor& grad_gamma, at::Tensor& grad_beta) {
  if (m > 0) {
    LayerNormBackwardKernel(at::kCPU, grad_out, x, mean, rstd, gamma, m, n, &grad_x, &grad_gamma, &grad_beta);
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, at::IntArrayRef normalized_shape, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight_opt, const std::optional<at::Tensor>& bias_opt,
    std::array<bool, 3> grad_input_mask) {
  kernel::common_device(grad_out, input, mean, rstd, weight_opt, bias_opt);
  const at::Tensor weight = weight_opt.value_or(at::Tensor()), bias = bias_opt.value_or(at::Tensor());
  const auto [m, n] = _check_layer_norm_inputs(input, normalized_shape, weight, bias);
  const at::Tensor x = input.contiguous();
  const at::Tensor gamma = contiguous_if_defined(weight);
  // With no rows the parameter gradients are zeros, and the kernel does not run.
  auto param_grad = [m](bool wanted, const at::Tensor& like) {
    return !wanted ? at::Tensor()
           : m > 0 ? at::empty_like(like, at::MemoryFormat::Contiguous)
                   : at::zeros_like(like, at::MemoryFormat::Contiguous);
  };
  at::Tensor grad_x = grad_input_mask[0] ? at::empty_like(x, at::MemoryFormat::Contiguous) : at::Tensor();
  at::Tensor grad_gamma = param_grad(grad_input_mask[1], gamma);
  at::Tensor grad_beta = param_grad(grad_input_mask[2], contiguous_if_defined(bias));
  OnDevice<&layer_norm_backward_kernel>::call(grad_out, x, mean, rstd, gamma, m, n, grad_x, grad_gamma, grad_beta);
  return {std::move(grad_x), std::move(grad_gamma), std::move(grad_beta)};
}
// LITERALINCLUDE END: LAYER_NORM

// LITERALINCLUDE START: DROPOUT
// CPU's dropout is made of ops (a mask drawn with bernoulli_, two products, a
// conversion), each of which is a queued emu kernel: run as it is, on the
// input's device, dropout queues instead of waiting and draws CPU's numbers.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  const c10::DeviceGuard guard(input.device());
  return native_dropout_cpu(input, p, train);
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  const c10::DeviceGuard guard(grad.device());
  return at::native::native_dropout_backward(grad, mask, scale);
}
// LITERALINCLUDE END: DROPOUT

// LITERALINCLUDE START: EMBEDDING_BACKWARD
// CPU's embedding backward reads the indices to add up gradient rows, so it
// runs as a kernel. Its result (zeros, num_weights rows) is allocated at the
// call, after CPU's own check of the indices' dtype, so the kernel is queued.
at::Tensor embedding_dense_backward(const at::Tensor& grad, const at::Tensor& indices, int64_t num_weights,
                                    int64_t padding_idx, bool scale_grad_by_freq) {
  const c10::DeviceIndex device = kernel::common_device(grad, indices);
  at::checkScalarTypes("embedding_backward", at::TensorArg(indices, "indices", 2), {at::kLong, at::kInt});
  const int64_t columns = grad.size(-1);
  // What CPU's kernel then checks, through its at::zeros of the result.
  TORCH_CHECK(num_weights >= 0, "zeros: Dimension size must be non-negative.");
  at::Tensor result = at::empty({num_weights, columns}, grad.options());
  return kernel::IntoResult<&embedding_dense_backward_cpu>::call(device, std::move(result), grad, indices,
                                                                 num_weights, padding_idx, scale_grad_by_freq);
}
// LITERALINCLUDE END: EMBEDDING_BACKWARD

} // namespace

void register_nn_kernels(torch::Library& m) {
  m.impl("_softmax", TORCH_FN(Structured<structured_softmax_cpu_out>::functional));
  m.impl("_log_softmax", TORCH_FN(Structured<structured_log_softmax_cpu_out>::functional));
  m.impl("_softmax_backward_data", TORCH_FN(Structured<structured_softmax_backward_cpu_out>::functional));
  m.impl("_log_softmax_backward_data", TORCH_FN(Structured<structured_log_softmax_backward_cpu_out>::functional));
  m.impl("nll_loss_forward", TORCH_FN((Structured<structured_nll_loss_forward_out_cpu, 2>::functional)));
  m.impl("nll_loss_backward", TORCH_FN(Structured<structured_nll_loss_backward_out_cpu>::functional));
  m.impl("max_pool2d_with_indices", TORCH_FN((Structured<structured_max_pool2d_with_indices_out_cpu, 2>::functional)));
  m.impl("max_pool2d_with_indices_backward",
         TORCH_FN(Structured<structured_max_pool2d_with_indices_backward_out_cpu>::functional));
  // Without a kernel, native_layer_norm would take its composite path (built
  // on batch norm): slower, and rounding differently from CPU.
  m.impl("native_layer_norm", TORCH_FN(native_layer_norm));
  m.impl("native_layer_norm_backward", TORCH_FN(native_layer_norm_backward));
  // CPU's batch norm checks that its tensors are CPU tensors.
  m.impl("native_batch_norm", TORCH_FN(OnHost<&batch_norm_cpu>::call));
  m.impl("native_batch_norm_backward", TORCH_FN(OnHost<&batch_norm_backward_cpu>::call));
  m.impl("embedding_dense_backward", TORCH_FN(embedding_dense_backward));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  m.impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
  m.impl("_scaled_dot_product_flash_attention_for_cpu",
         TORCH_FN(OnDevice<&_scaled_dot_product_flash_attention_cpu>::call));
  m.impl("_scaled_dot_product_flash_attention_for_cpu_backward",
         TORCH_FN(OnDevice<&_scaled_dot_product_flash_attention_cpu_backward>::call));
}

} // namespace torch_emu
