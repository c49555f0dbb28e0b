// The fallback: every aten operator without a tpldev kernel runs PyTorch's CPU
// kernel on copies of its tpldev tensors (at::native::cpu_fallback), after two
// checks of our own: all tensors on one device, and random ops drawing from
// the tpldev generator. Then the few ops whose CPU path the fallback cannot
// reach (convolution), that draw without a generator argument (dropout) or
// that write to an argument their schema does not mark as written (batch norm).
// Guide: torch-emu docs/guide/operators.md
#include <ATen/core/Tensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/native_batch_norm.h>
#include <ATen/ops/ones_like.h>
#include <torch/library.h>

#include "core/generator.h"

namespace torch_tpldev {
namespace {

bool is_generator(const c10::TypePtr& type) {
  const auto* optional = type->castRaw<c10::OptionalType>();
  return (optional != nullptr ? optional->getElementType() : type)->kind() == c10::TypeKind::GeneratorType;
}

// LITERALINCLUDE START: FALLBACK
void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t first = stack->size() - schema.arguments().size();
  // The device of the op: like CUDA, refuse tensors of another device, except
  // zero-dimensional CPU tensors (Python numbers).
  std::optional<c10::Device> device;
  std::optional<c10::Device> other;
  auto visit = [&](const c10::IValue& v) {
    if (!v.isTensor() || !v.toTensor().defined()) {
      return;
    }
    const at::Tensor& t = v.toTensor();
    if (t.device().is_privateuseone() && (!device.has_value() || *device == t.device())) {
      device = t.device();
    } else if (!t.device().is_cpu() || t.dim() > 0) {
      other = t.device();
    }
  };
  for (size_t i = first; i < stack->size(); ++i) {
    if ((*stack)[i].isList()) {
      for (const c10::IValue& item : (*stack)[i].toListRef()) {
        visit(item);
      }
    } else {
      visit((*stack)[i]);
    }
  }
  TORCH_CHECK(!device.has_value() || !other.has_value(),
              "Expected all tensors to be on the same device, but found at least two devices, ", *device, " and ",
              *other, "! (in ", schema.name(), ")");
  // A random op gets the CPU generator behind the tpldev one it was given,
  // or behind the default generator of its device.
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    c10::IValue& arg = (*stack)[first + i];
    if (!is_generator(schema.arguments()[i].type())) {
      continue;
    }
    const at::Generator gen =
        arg.isNone() ? default_generator(device.has_value() ? device->index() : -1) : arg.toGenerator();
    TORCH_CHECK(gen.device().is_privateuseone(), "Expected a generator of device ",
                c10::DeviceTypeName(c10::DeviceType::PrivateUse1, true), " for ", schema.name(),
                ", but got one of ", gen.device());
    arg = c10::IValue(at::check_generator<GeneratorImpl>(gen)->host());
  }
  // A view op must have its own kernel: a copy would not see later writes.
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}
// LITERALINCLUDE END: FALLBACK

std::optional<at::Tensor> cpu_copy(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? std::optional(t->cpu()) : std::nullopt;
}

// LITERALINCLUDE START: FALLBACK_EXCEPTIONS
// Convolution picks its implementation by device; for a PrivateUse1 tensor
// it calls convolution_overrideable, whose CPU kernel only raises. So run
// PyTorch's convolution on CPU copies here.
at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                                    at::IntArrayRef output_padding, int64_t groups) {
  return at::convolution(input.cpu(), weight.cpu(), cpu_copy(bias), stride, padding, dilation, transposed,
                         output_padding, groups)
      .to(input.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  auto [gi, gw, gb] = at::convolution_backward(grad_output.cpu(), input.cpu(), weight.cpu(),
                                               at::IntArrayRef(channels), stride, padding, dilation, transposed,
                                               output_padding, groups, output_mask);
  auto back = [&](const at::Tensor& t) { return t.defined() ? t.to(input.device()) : t; };
  return {back(gi), back(gw), back(gb)};
}

// CPU's dropout kernel draws from the CPU default generator (it has no
// generator argument); written with bernoulli_, it draws from the tpldev one.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (!train.value_or(true)) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  const double keep = 1.0 - p;
  const at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool)).bernoulli_(keep);
  return {input.mul(mask).mul_(keep == 0 ? 0.0 : 1.0 / keep), mask};
}

// Training batch norm updates running_mean and running_var in place, but the
// schema of native_batch_norm does not mark them as written, so the fallback
// would update CPU copies and drop them. Write them back here.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  const std::optional<at::Tensor> mean = cpu_copy(running_mean);
  const std::optional<at::Tensor> var = cpu_copy(running_var);
  auto [out, save_mean, save_invstd] =
      at::native_batch_norm(input.cpu(), cpu_copy(weight), cpu_copy(bias), mean, var, training, momentum, eps);
  for (const auto& [copy, original] : {std::pair(mean, running_mean), std::pair(var, running_var)}) {
    if (copy.has_value()) {
      original->copy_(*copy);
    }
  }
  return {out.to(input.device()), save_mean.to(input.device()), save_invstd.to(input.device())};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("native_batch_norm", TORCH_FN(native_batch_norm));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
  m.impl("native_dropout", TORCH_FN(native_dropout));
}
// LITERALINCLUDE END: FALLBACK_EXCEPTIONS

} // namespace
} // namespace torch_tpldev
