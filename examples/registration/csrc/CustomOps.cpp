// Scenario 3: a custom operator in a new namespace, emu::, with a forward, a
// backward, autograd and a Meta kernel (so torch.compile and FakeTensor can
// trace it), written in C++. Its Python twin is torch_emu_examples/custom_ops.py,
// which also shows how Python adds more operators to this same namespace.
//
//   emu::scaled_gelu(x, scale)                   = scale * gelu(x)
//   emu::scaled_gelu_backward(grad, x, scale)    = scale * gelu'(x) * grad
#include <ATen/ops/empty.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/gelu_backward.h>
#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "aten/EmuHostAlias.h"
#include "core/EmuLaunch.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

// LITERALINCLUDE START: CUSTOM_OP_DEF
// The schema is the contract every kernel (and torch.compile) relies on: this
// op is functional (no "(a!)" annotations: it mutates and aliases nothing).
TORCH_LIBRARY(emu, m) {
  m.def("scaled_gelu(Tensor x, float scale) -> Tensor");
  m.def("scaled_gelu_backward(Tensor grad, Tensor x, float scale) -> Tensor");
}
// LITERALINCLUDE END: CUSTOM_OP_DEF

// LITERALINCLUDE START: CUSTOM_OP_KERNELS
// The CPU kernels. Outputs are always contiguous; the Meta kernels promise it.
at::Tensor scaled_gelu_cpu(const at::Tensor& x, double scale) {
  return at::gelu(x.contiguous()).mul_(scale);
}

at::Tensor scaled_gelu_backward_cpu(const at::Tensor& grad, const at::Tensor& x, double scale) {
  return at::gelu_backward(grad.contiguous(), x.contiguous()).mul_(scale);
}

// The emu kernels: the CPU kernel launched on the current stream over host
// aliases of the inputs. Outputs allocated inside the launch are device
// memory (see EmuLaunch.cpp) and become emu tensors without a copy.
at::Tensor scaled_gelu_emu(const at::Tensor& x, double scale) {
  const c10::DeviceGuard guard(x.device());
  HostAliases aliases;
  const at::Tensor x_host = aliases.alias(x);
  at::Tensor out_host;
  launch_kernel(current_stream(x.device().index()), [&] { out_host = scaled_gelu_cpu(x_host, scale); });
  return aliases.to_emu(out_host, x.device().index());
}

at::Tensor scaled_gelu_backward_emu(const at::Tensor& grad, const at::Tensor& x, double scale) {
  TORCH_CHECK(grad.device() == x.device(), "emu::scaled_gelu_backward: grad is on ", grad.device(),
              " but x is on ", x.device());
  const c10::DeviceGuard guard(x.device());
  HostAliases aliases;
  const at::Tensor grad_host = aliases.alias(grad);
  const at::Tensor x_host = aliases.alias(x);
  at::Tensor out_host;
  launch_kernel(current_stream(x.device().index()),
                [&] { out_host = scaled_gelu_backward_cpu(grad_host, x_host, scale); });
  return aliases.to_emu(out_host, x.device().index());
}
// LITERALINCLUDE END: CUSTOM_OP_KERNELS

// LITERALINCLUDE START: CUSTOM_OP_META
// Meta kernels: shapes, strides and dtypes only, no data. FakeTensor (and so
// torch.compile, torch.export and opcheck) runs these for any device. They
// use symbolic sizes so that dynamic shapes trace too.
at::Tensor scaled_gelu_meta(const at::Tensor& x, double scale) {
  return at::empty_symint(x.sym_sizes(), x.options());
}

at::Tensor scaled_gelu_backward_meta(const at::Tensor& grad, const at::Tensor& x, double scale) {
  return at::empty_symint(x.sym_sizes(), x.options());
}
// LITERALINCLUDE END: CUSTOM_OP_META

// LITERALINCLUDE START: CUSTOM_OP_AUTOGRAD
// Autograd: forward redispatches below autograd to the device kernel (emu,
// CPU or Meta), backward calls the backward operator, which is itself an op
// so torch.compile sees it in the backward graph.
class ScaledGelu : public torch::autograd::Function<ScaledGelu> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, double scale) {
    ctx->save_for_backward({x});
    ctx->saved_data["scale"] = scale;
    at::AutoDispatchBelowADInplaceOrView below;
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("emu::scaled_gelu", "")
                               .typed<at::Tensor(const at::Tensor&, double)>();
    return op.call(x, scale);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("emu::scaled_gelu_backward", "")
                               .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
    return {op.call(grads[0], x, ctx->saved_data["scale"].toDouble()), at::Tensor()};
  }
};

at::Tensor scaled_gelu_autograd(const at::Tensor& x, double scale) {
  return ScaledGelu::apply(x, scale);
}
// LITERALINCLUDE END: CUSTOM_OP_AUTOGRAD

} // namespace

// LITERALINCLUDE START: CUSTOM_OP_REGISTER
TORCH_LIBRARY_IMPL(emu, PrivateUse1, m) {
  m.impl("scaled_gelu", TORCH_FN(scaled_gelu_emu));
  m.impl("scaled_gelu_backward", TORCH_FN(scaled_gelu_backward_emu));
}

TORCH_LIBRARY_IMPL(emu, CPU, m) {
  m.impl("scaled_gelu", TORCH_FN(scaled_gelu_cpu));
  m.impl("scaled_gelu_backward", TORCH_FN(scaled_gelu_backward_cpu));
}

TORCH_LIBRARY_IMPL(emu, Meta, m) {
  m.impl("scaled_gelu", TORCH_FN(scaled_gelu_meta));
  m.impl("scaled_gelu_backward", TORCH_FN(scaled_gelu_backward_meta));
}

// "Autograd" is an alias key: one registration covers AutogradCPU,
// AutogradPrivateUse1, AutogradMeta... The backward op is not registered
// here: differentiating it again (double backward) is not supported.
TORCH_LIBRARY_IMPL(emu, Autograd, m) {
  m.impl("scaled_gelu", TORCH_FN(scaled_gelu_autograd));
}
// LITERALINCLUDE END: CUSTOM_OP_REGISTER

} // namespace torch_emu
