// Native emu kernels: softmax and losses, layer and batch norm, embedding
// backward, max pooling, dropout and CPU's fused attention (forward and
// backward). Each was a top entry of an emu training-step profile.
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_log_softmax_backward_data_native.h>
#include <ATen/ops/_log_softmax_native.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward_native.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_native.h>
#include <ATen/ops/_softmax_backward_data_native.h>
#include <ATen/ops/_softmax_native.h>
#include <ATen/ops/embedding_dense_backward_native.h>
#include <ATen/ops/max_pool2d_with_indices_backward_native.h>
#include <ATen/ops/max_pool2d_with_indices_native.h>
#include <ATen/ops/native_batch_norm_backward_native.h>
#include <ATen/ops/native_batch_norm_native.h>
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
  m.impl("native_layer_norm", TORCH_FN(OnDevice<&layer_norm_cpu>::call));
  m.impl("native_layer_norm_backward", TORCH_FN(OnDevice<&layer_norm_backward_cpu>::call));
  // CPU's batch norm checks that its tensors are CPU tensors.
  m.impl("native_batch_norm", TORCH_FN(OnHost<&batch_norm_cpu>::call));
  m.impl("native_batch_norm_backward", TORCH_FN(OnHost<&batch_norm_backward_cpu>::call));
  m.impl("embedding_dense_backward", TORCH_FN(OnDevice<&embedding_dense_backward_cpu>::call));
  m.impl("native_dropout", TORCH_FN(OnDevice<&native_dropout_cpu>::call));
  m.impl("_scaled_dot_product_flash_attention_for_cpu",
         TORCH_FN(OnDevice<&_scaled_dot_product_flash_attention_cpu>::call));
  m.impl("_scaled_dot_product_flash_attention_for_cpu_backward",
         TORCH_FN(OnDevice<&_scaled_dot_product_flash_attention_cpu_backward>::call));
}

} // namespace torch_emu
