// Scenario 4: a C++ torch::autograd::Function as the AutogradPrivateUse1
// kernel of an operator.
//
// emu::fused_linear_relu(x, weight, bias) = relu(x @ weight.T + bias), in one
// device launch instead of three. Its forward and backward are written as one
// autograd::Function; the dispatcher calls it for emu tensors (and, to give
// the tests a CPU reference, for CPU tensors) before the device kernel.
#include <ATen/ops/empty.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/linear.h>
#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "aten/EmuHostAlias.h"
#include "core/EmuLaunch.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

TORCH_LIBRARY_FRAGMENT(emu, m) {
  m.def("fused_linear_relu(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor");
}

at::Tensor fused_linear_relu_cpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  return at::linear(x, weight, bias).relu_();
}

// One launch: matmul, bias and relu run back to back on the device.
at::Tensor fused_linear_relu_emu(const at::Tensor& x, const at::Tensor& weight,
                                 const std::optional<at::Tensor>& bias) {
  const c10::DeviceGuard guard(x.device());
  HostAliases aliases;
  const at::Tensor x_host = aliases.alias(x);
  const at::Tensor w_host = aliases.alias(weight);
  const std::optional<at::Tensor> b_host = aliases.alias(bias);
  at::Tensor out_host;
  launch_kernel(current_stream(x.device().index()),
                [&] { out_host = fused_linear_relu_cpu(x_host, w_host, b_host); });
  return aliases.to_emu(out_host, x.device().index());
}

at::Tensor fused_linear_relu_meta(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  c10::SymDimVector sizes(x.sym_sizes().begin(), x.sym_sizes().end());
  sizes.back() = weight.sym_size(0);
  return at::empty_symint(sizes, x.options());
}

// LITERALINCLUDE START: AUTOGRAD_FUNCTION
class FusedLinearRelu : public torch::autograd::Function<FusedLinearRelu> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias) {
    at::Tensor out;
    {
      // Below autograd: reach the device kernel (PrivateUse1 or CPU).
      at::AutoDispatchBelowADInplaceOrView below;
      static const auto op =
          c10::Dispatcher::singleton()
              .findSchemaOrThrow("emu::fused_linear_relu", "")
              .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&)>();
      out = op.call(x, weight, bias);
    }
    ctx->save_for_backward({x, weight, out});
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    return out;
  }

  // Ordinary aten ops on the device; autograd records them if create_graph.
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& out = saved[2];
    const at::Tensor grad = grads[0] * out.gt(0);                     // through relu
    const at::Tensor grad_2d = grad.reshape({-1, weight.size(0)});
    const at::Tensor grad_x = grad.matmul(weight);                     // d/dx (x W^T)
    const at::Tensor grad_w = grad_2d.t().mm(x.reshape({-1, weight.size(1)}));
    const at::Tensor grad_b = ctx->saved_data["has_bias"].toBool() ? grad_2d.sum(0) : at::Tensor();
    return {grad_x, grad_w, grad_b};
  }
};

at::Tensor fused_linear_relu_autograd(const at::Tensor& x, const at::Tensor& weight,
                                      const std::optional<at::Tensor>& bias) {
  return FusedLinearRelu::apply(x, weight, bias);
}
// LITERALINCLUDE END: AUTOGRAD_FUNCTION

} // namespace

// LITERALINCLUDE START: AUTOGRAD_FUNCTION_REGISTER
TORCH_LIBRARY_IMPL(emu, AutogradPrivateUse1, m) {
  m.impl("fused_linear_relu", TORCH_FN(fused_linear_relu_autograd));
}

TORCH_LIBRARY_IMPL(emu, PrivateUse1, m) {
  m.impl("fused_linear_relu", TORCH_FN(fused_linear_relu_emu));
}
// LITERALINCLUDE END: AUTOGRAD_FUNCTION_REGISTER

// The CPU twin is the reference the tests compare against; Meta lets
// FakeTensor and torch.compile trace the op.
TORCH_LIBRARY_IMPL(emu, AutogradCPU, m) {
  m.impl("fused_linear_relu", TORCH_FN(fused_linear_relu_autograd));
}

TORCH_LIBRARY_IMPL(emu, CPU, m) {
  m.impl("fused_linear_relu", TORCH_FN(fused_linear_relu_cpu));
}

TORCH_LIBRARY_IMPL(emu, Meta, m) {
  m.impl("fused_linear_relu", TORCH_FN(fused_linear_relu_meta));
}

} // namespace torch_emu
