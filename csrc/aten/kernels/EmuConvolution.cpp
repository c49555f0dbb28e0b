// Convolutions. PyTorch's convolution picks a backend by device type and, for
// an out-of-tree device, calls the two "overrideable" operators, which have
// no CPU kernel for the fallback to run. These kernels run CPU's convolution
// (and its backward) on device memory, through the one launch path.
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <functional>

#include "aten/EmuHostAlias.h"
#include "core/EmuLaunch.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

// LITERALINCLUDE START: OP_CONVOLUTION
// The results have the memory format CPU's kernel gives them: channels last
// when the input or the weight is, as on CUDA (and as PyTorch's module tests
// expect of every device). PyTorch's fake convolution would answer contiguous
// for an out-of-tree device; on emu it asks CPU instead
// (torch_emu/compile/fake_convolution.py), so compiled code agrees.
at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                                    at::IntArrayRef output_padding, int64_t groups) {
  const c10::DeviceGuard guard(input.device());
  HostAliases aliases;
  const at::Tensor x = aliases.alias(input), w = aliases.alias(weight);
  const std::optional<at::Tensor> b = aliases.alias(bias);
  // By value: a graph replays it (EmuGraph.h), the emu storages kept alive.
  auto run = [x, w, b, stride = stride.vec(), padding = padding.vec(), dilation = dilation.vec(), transposed,
              output_padding = output_padding.vec(), groups] {
    return at::convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups);
  };
  at::Tensor out;
  launch_kernel(
      current_stream(input.device().index()), [&] { out = run(); },
      [&]() -> std::function<void()> { return [run, memory = aliases.emu_storages()] { (void)run(); }; });
  return aliases.to_emu(out, input.device().index());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  const c10::DeviceGuard guard(input.device());
  HostAliases aliases;
  const at::Tensor go = aliases.alias(grad_output), x = aliases.alias(input), w = aliases.alias(weight);
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  auto run = [go, x, w, out_channels, stride = stride.vec(), padding = padding.vec(), dilation = dilation.vec(),
              transposed, output_padding = output_padding.vec(), groups, output_mask] {
    return at::convolution_backward(go, x, w, std::vector<int64_t>{out_channels}, stride, padding, dilation,
                                    transposed, output_padding, groups, output_mask);
  };
  std::tuple<at::Tensor, at::Tensor, at::Tensor> grads;
  launch_kernel(
      current_stream(input.device().index()), [&] { grads = run(); },
      [&]() -> std::function<void()> { return [run, memory = aliases.emu_storages()] { (void)run(); }; });
  const c10::DeviceIndex device = input.device().index();
  return {aliases.to_emu(std::get<0>(grads), device), aliases.to_emu(std::get<1>(grads), device),
          aliases.to_emu(std::get<2>(grads), device)};
}
// LITERALINCLUDE END: OP_CONVOLUTION

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
}

} // namespace
} // namespace torch_emu
