// Convolutions. PyTorch's convolution picks a backend by device type and, for
// an out-of-tree device, calls the two "overrideable" operators, which have
// no CPU kernel for the fallback to run. These kernels run CPU's convolution
// (and its backward) on device memory, through the one launch path.
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <functional>
#include <optional>
#include <tuple>
#include <vector>

#include "aten/EmuHostAlias.h"
#include "aten/kernels/EmuKernelFunctions.h"
#include "core/EmuLaunch.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

// By value: a queued kernel, or a graph's replay, outlives the call.
struct ConvParams {
  std::vector<int64_t> stride, padding, dilation;
  bool transposed;
  std::vector<int64_t> output_padding;
  int64_t groups;
};

// LITERALINCLUDE START: OP_CONVOLUTION
// The results have the memory format CPU's kernel gives them: channels last
// when the input or the weight is, as on CUDA (and as PyTorch's module tests
// expect of every device). PyTorch's fake convolution would answer contiguous
// for an out-of-tree device; on emu it asks CPU instead
// (torch_emu/compile/fake_convolution.py), so compiled code agrees.
//
// CPU's convolution allocates its results inside, so a kernel that runs it
// must be waited for, unless the host makes the results at the call
// (made_in in EmuKernelFunctions.h). Their memory format is CPU's choice for
// host aliases of the arguments (metadata only: nothing reads the memory),
// made as PyTorch's fake convolution on CPU makes it. Only where CPU's kernel
// raises nothing the host has not checked (PyTorch's convolution checked the
// shapes before it called this op): a 2-d or 3-d convolution of float or
// double tensors of one dtype. For any other (1-d, mixed or other dtypes)
// this is nullopt and the kernel waits, to raise CPU's error at the call.
std::optional<at::MemoryFormat> queued_format(const at::Tensor& input, const at::Tensor& weight,
                                              const std::optional<at::Tensor>& bias, const at::Tensor& other,
                                              const ConvParams& p) {
  const at::ScalarType dtype = input.scalar_type();
  auto same = [dtype](const std::optional<at::Tensor>& t) {
    return !t.has_value() || !t->defined() || (t->scalar_type() == dtype && !t->is_quantized());
  };
  if ((input.dim() != 4 && input.dim() != 5) || (dtype != at::kFloat && dtype != at::kDouble) ||
      input.is_quantized() || !same(weight) || !same(bias) || !same(other)) {
    return std::nullopt;
  }
  HostAliases aliases;
  const at::Tensor x = aliases.alias(input), w = aliases.alias(weight);
  const at::native::ConvBackend backend = at::native::select_conv_backend(
      x, w, aliases.alias(bias), c10::fromIntArrayRefSlow(p.stride), c10::fromIntArrayRefSlow(p.padding),
      c10::fromIntArrayRefSlow(p.dilation), p.transposed, c10::fromIntArrayRefSlow(p.output_padding), p.groups,
      std::nullopt);
  return at::native::_determine_backend_memory_format(x, w, backend);
}

// Runs `run` (CPU's convolution or its backward on host aliases of emu
// tensors, its results as a vector) as one kernel on the current stream of
// `device`. With `results` (made at the call; an undefined one is a result
// the op does not return) the kernel is queued and fills them; without, it
// waits and its own results become emu tensors.
template <typename Run, typename... Args>
std::vector<at::Tensor> launch_conv(c10::DeviceIndex device, std::vector<at::Tensor> results, Run run,
                                    const Args&... args) {
  auto fill = [run](const std::vector<at::Tensor>& into, const auto&... a) {
    HostAliases aliases;
    const std::vector<at::Tensor> made = kernel::made_in(into, [&] { return run(aliases, a...); });
    for (size_t i = 0; i < into.size(); ++i) {
      if (into[i].defined()) {
        kernel::settle(aliases.alias(into[i]), made[i]);
      }
    }
  };
  auto owning = [&]() -> std::function<void()> {
    return [fill, into = kernel::keep(at::TensorList(results)), kept = std::make_tuple(kernel::keep(args)...)] {
      std::apply([&](const auto&... a) { fill(into, a...); }, kept);
    };
  };
  if (!results.empty()) {
    // Onto an idle stream at once whatever its size: a convolution is long
    // on arithmetic, and at once it gets the host thread's OpenMP team, queued
    // only the worker's (one thread on two cores). Queued, a compiled CNN's
    // forward took 1.36-1.39x CPU's, at once 0.93-1.00x (two cores).
    kernel::queue_on(device, [&] { fill(results, args...); }, owning, "convolution_overrideable",
                     kernel::tensor_bytes(args..., at::TensorList(results)), QueueRule::kAtOnceWhenIdle);
    return results;
  }
  HostAliases aliases;
  std::vector<at::Tensor> made;
  launch_kernel(current_stream(device), [&] { made = run(aliases, args...); }, [&]() -> std::function<void()> {
    return [run, kept = std::make_tuple(kernel::keep(args)...)] {
      std::apply([&](const auto&... a) { HostAliases fresh; (void)run(fresh, a...); }, kept);
    };
  });
  for (at::Tensor& t : made) {
    t = aliases.to_emu(t, device);
  }
  return made;
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                                    at::IntArrayRef output_padding, int64_t groups) {
  const c10::DeviceGuard guard(input.device());
  const ConvParams p{stride.vec(), padding.vec(), dilation.vec(), transposed, output_padding.vec(), groups};
  auto run = [p](HostAliases& aliases, const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b) {
    return std::vector<at::Tensor>{at::convolution(aliases.alias(x), aliases.alias(w), aliases.alias(b), p.stride,
                                                   p.padding, p.dilation, p.transposed, p.output_padding, p.groups)};
  };
  std::vector<at::Tensor> results;
  if (const std::optional<at::MemoryFormat> format = queued_format(input, weight, bias, at::Tensor(), p)) {
    const std::vector<int64_t> sizes =
        transposed ? at::native::conv_input_size(input.sizes(), weight.sizes(), padding, output_padding, stride,
                                                 dilation, groups)
                   : at::native::conv_output_size(input.sizes(), weight.sizes(), padding, stride, dilation);
    results.push_back(at::empty(sizes, input.options().memory_format(*format)));
  }
  return launch_conv(input.device().index(), std::move(results), run, input, weight, bias).front();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  const c10::DeviceGuard guard(input.device());
  const ConvParams p{stride.vec(), padding.vec(), dilation.vec(), transposed, output_padding.vec(), groups};
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  auto run = [p, out_channels, output_mask](HostAliases& aliases, const at::Tensor& go, const at::Tensor& x,
                                            const at::Tensor& w) {
    auto [gi, gw, gb] = at::convolution_backward(aliases.alias(go), aliases.alias(x), aliases.alias(w),
                                                 std::vector<int64_t>{out_channels}, p.stride, p.padding, p.dilation,
                                                 p.transposed, p.output_padding, p.groups, output_mask);
    return std::vector<at::Tensor>{gi, gw, gb};
  };
  std::vector<at::Tensor> results;
  if (const std::optional<at::MemoryFormat> format = queued_format(input, weight, std::nullopt, grad_output, p)) {
    auto made_if = [&](bool wanted, at::IntArrayRef sizes, const at::Tensor& like, at::MemoryFormat f) {
      return wanted ? at::empty(sizes, like.options().memory_format(f)) : at::Tensor();
    };
    results = {made_if(output_mask[0], input.sizes(), input, *format),
               made_if(output_mask[1], weight.sizes(), weight, *format),
               made_if(output_mask[2], {out_channels}, grad_output, at::MemoryFormat::Contiguous)};
  }
  std::vector<at::Tensor> grads = launch_conv(input.device().index(), std::move(results), run, grad_output, input, weight);
  return {grads[0], grads[1], grads[2]};
}
// LITERALINCLUDE END: OP_CONVOLUTION

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
}

} // namespace
} // namespace torch_emu
