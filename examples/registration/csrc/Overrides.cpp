// Scenario 6: a fallthrough registration, and a CompositeImplicitAutograd
// operator overridden by a device kernel. (The Meta registration of the
// custom operators is in CustomOps.cpp.)
#include <ATen/ops/empty.h>
#include <ATen/ops/round.h>
#include <ATen/ops/mul_cpu_dispatch.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/square.h>
#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "aten/EmuHostAlias.h"
#include "core/EmuLaunch.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

at::Tensor run_on_emu(const at::Tensor& x, at::Tensor (*cpu_kernel)(const at::Tensor&)) {
  const c10::DeviceGuard guard(x.device());
  HostAliases aliases;
  const at::Tensor x_host = aliases.alias(x);
  at::Tensor out_host;
  launch_kernel(current_stream(x.device().index()), [&] { out_host = cpu_kernel(x_host); });
  return aliases.to_emu(out_host, x.device().index());
}

// --- Fallthrough -----------------------------------------------------------

// emu::round_to_grid(x, step) = round(x / step) * step: snaps values to a
// grid, e.g. to simulate a fixed-point format. It is piecewise constant, so
// it has no useful gradient: its result is treated as a constant.
TORCH_LIBRARY_FRAGMENT(emu, m) {
  m.def("round_to_grid(Tensor x, float step) -> Tensor");
}

// Reached through the fallthrough below, this kernel runs with autograd
// still active (no autograd kernel turned it off), so the ops it calls would
// be recorded on CPU tensors that require grad. It turns autograd off itself.
at::Tensor round_to_grid_cpu(const at::Tensor& x, double step) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return at::round(x.div(step)).mul_(step);
}

at::Tensor round_to_grid_emu(const at::Tensor& x, double step) {
  const c10::DeviceGuard guard(x.device());
  HostAliases aliases;
  const at::Tensor x_host = aliases.alias(x);
  at::Tensor out_host;
  launch_kernel(current_stream(x.device().index()), [&] { out_host = round_to_grid_cpu(x_host, step); });
  return aliases.to_emu(out_host, x.device().index());
}

at::Tensor round_to_grid_meta(const at::Tensor& x, double step) {
  return at::empty_symint(x.sym_sizes(), x.options());
}

TORCH_LIBRARY_IMPL(emu, PrivateUse1, m) {
  m.impl("round_to_grid", TORCH_FN(round_to_grid_emu));
}
TORCH_LIBRARY_IMPL(emu, CPU, m) {
  m.impl("round_to_grid", TORCH_FN(round_to_grid_cpu));
}
TORCH_LIBRARY_IMPL(emu, Meta, m) {
  m.impl("round_to_grid", TORCH_FN(round_to_grid_meta));
}

// LITERALINCLUDE START: FALLTHROUGH
// An op with no autograd kernel gets PyTorch's autograd fallback, which
// assumes the op might be differentiable: given an input that requires grad,
// its floating-point output requires grad too and backward through it warns
// "an autograd kernel was not registered". A fallthrough on the autograd keys
// says "autograd has nothing to do here": the dispatcher skips the key, the
// output is a constant (requires_grad=False) and the call costs nothing extra.
// The price: the kernels run with autograd on (see round_to_grid_cpu).
TORCH_LIBRARY_IMPL(emu, AutogradPrivateUse1, m) {
  m.impl("round_to_grid", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(emu, AutogradCPU, m) {
  m.impl("round_to_grid", torch::CppFunction::makeFallthrough());
}
// LITERALINCLUDE END: FALLTHROUGH

// --- Overriding a CompositeImplicitAutograd op ------------------------------

// LITERALINCLUDE START: OVERRIDE_COMPOSITE
// aten::square is CompositeImplicitAutograd: it has no kernel of its own and
// decomposes into pow(x, 2), which autograd then differentiates. An emu
// kernel for PrivateUse1 replaces the decomposition with one multiply.
at::Tensor square_cpu(const at::Tensor& x) {
  // x * x gives the same values and dtype as pow(x, 2), except for bool
  // (pow promotes it to int64).
  return x.scalar_type() == at::kBool ? at::pow(x, 2) : at::cpu::mul(x, x);
}

at::Tensor square_emu(const at::Tensor& x) {
  return run_on_emu(x, &square_cpu);
}

// With its own backend kernel, the op no longer decomposes for emu in
// autograd either, and no autograd formula exists for it: the autograd key
// must be registered too. When a gradient is needed this kernel uses the
// differentiable decomposition (exactly what CPU does); otherwise it goes
// below autograd to the fast device kernel.
at::Tensor square_autograd(const at::Tensor& x) {
  if (at::GradMode::is_enabled() && x.requires_grad()) {
    return at::pow(x, 2);
  }
  at::AutoDispatchBelowADInplaceOrView below;
  return at::square(x);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("square", TORCH_FN(square_emu));
}
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("square", TORCH_FN(square_autograd));
}
// LITERALINCLUDE END: OVERRIDE_COMPOSITE

} // namespace
} // namespace torch_emu
