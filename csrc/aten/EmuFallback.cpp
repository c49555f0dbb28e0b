// The global fallback: any aten op without an emu kernel runs PyTorch's own
// CPU kernel directly on the device memory, as a kernel on the current emu
// stream. Inputs are aliased (HostAliases), outputs are allocated in device
// memory by the kernel-aware CPU allocator, so nothing is copied.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <chrono>

#include "aten/EmuDeviceCheck.h"
#include "aten/EmuFallback.h"
#include "aten/EmuFallbackReport.h"
#include "aten/EmuHostAlias.h"
#include "core/EmuGenerator.h"
#include "core/EmuLaunch.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

bool is_emu(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

bool is_optional_generator(const c10::Argument& arg) {
  const auto& type = arg.type();
  return type->kind() == c10::OptionalType::Kind &&
      type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::GeneratorType::Kind;
}

// Ops that, like on CUDA, accept host index tensors beside device tensors.
bool accepts_host_tensors(const c10::OperatorName& name) {
  return name.name == "aten::index" || name.name == "aten::index_put_" ||
      name.name == "aten::index_put" || name.name == "aten::_index_put_impl_";
}


// Applies `fn` to every tensor in an IValue (tensor, or list of tensors or
// optional tensors); returns the IValue rebuilt from fn's results.
template <typename Fn>
c10::IValue map_tensors(const c10::IValue& value, Fn&& fn) {
  if (value.isTensor()) {
    return fn(value.toTensor());
  }
  if (value.isList()) {
    c10::impl::GenericList in = value.toList();
    c10::impl::GenericList out(in.elementType());
    out.reserve(in.size());
    for (const c10::IValue& element : in) {
      out.push_back(element.isTensor() ? c10::IValue(fn(element.toTensor())) : element);
    }
    return out;
  }
  return value;
}

template <typename Fn>
void for_each_tensor(const c10::IValue& value, Fn&& fn) {
  if (value.isTensor()) {
    fn(value.toTensor());
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor()) {
        fn(element.toTensor());
      }
    }
  }
}

void run_on_device(const c10::OperatorHandle& op, c10::DispatchKey cpu_key, torch::jit::Stack* stack);

} // namespace

// LITERALINCLUDE START: FALLBACK_WATCH
// The boxed fallback. Usually it just runs the op; when a vendor asked for a
// fallback report (or for fallbacks to be errors) it is timed or refused.
// `keys` names the emu key it runs for (PrivateUse1, SparsePrivateUse1...):
// the CPU kernel is the one of the same functionality (CPU, SparseCPU...).
void emu_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const c10::DispatchKey layout = c10::toFunctionalityKey(keys.highestPriorityTypeId());
  const c10::DispatchKey cpu_key = layout == c10::DispatchKey::Sparse || layout == c10::DispatchKey::SparseCsr
      ? c10::toRuntimePerBackendFunctionalityKey(layout, c10::BackendComponent::CPUBit)
      : c10::DispatchKey::CPU;
  if (C10_LIKELY(!fallback_watched())) {
    run_on_device(op, cpu_key, stack);
    return;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(!fallback_is_error(), "'", op.schema().operator_name(),
                              "' has no emu kernel and fallbacks are errors (TORCH_EMU_FALLBACK_ERROR=1 "
                              "or torch_emu.tools.fallback_report(error=True))");
  const auto start = std::chrono::steady_clock::now();
  run_on_device(op, cpu_key, stack);
  record_fallback(op.schema().operator_name(),
                  std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}
// LITERALINCLUDE END: FALLBACK_WATCH

namespace {

// LITERALINCLUDE START: FALLBACK_KERNEL
void run_on_device(const c10::OperatorHandle& op, c10::DispatchKey cpu_key, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const auto args = torch::jit::last(*stack, num_args);
  TORCH_CHECK_NOT_IMPLEMENTED(op.hasKernelForDispatchKey(cpu_key),
                              "The operator '", schema.operator_name(),
                              "' is not implemented for emu",
                              cpu_key == c10::DispatchKey::CPU ? "" : " tensors of this layout",
                              ": it has neither an emu kernel nor a ", cpu_key, " kernel for the emu fallback to run.");

  // 1. Which device runs it (and no tensors on two devices).
  DeviceCheck check;
  for (const c10::IValue& arg : args) {
    for_each_tensor(arg, [&](const at::Tensor& t) { check.visit(t); });
  }
  const bool no_emu_tensor = check.index < 0;
  c10::DeviceIndex device = check.finish(schema.operator_name().name.c_str(),
                                         check.host_tensor && accepts_host_tensors(schema.operator_name()));

  // 2. Rewrite the arguments for the CPU kernel: emu tensors become aliases of
  // their device memory, an emu device argument (factory ops) becomes CPU, and
  // random ops get the CPU generator behind the emu generator.
  HostAliases aliases;
  for (size_t i = 0; i < num_args; ++i) {
    c10::IValue& arg = (*stack)[stack->size() - num_args + i];
    if (arg.isDevice() && arg.toDevice().type() == c10::DeviceType::PrivateUse1) {
      if (no_emu_tensor && arg.toDevice().has_index()) {
        device = arg.toDevice().index();
      }
      arg = c10::Device(c10::DeviceType::CPU);
    } else {
      arg = map_tensors(arg, [&](const at::Tensor& t) { return is_emu(t) ? aliases.alias(t) : t; });
    }
  }
  for (size_t i = 0; i < num_args; ++i) {
    if (is_optional_generator(schema.arguments()[i])) {
      c10::IValue& arg = (*stack)[stack->size() - num_args + i];
      arg = cpu_generator_for(arg.toOptional<at::Generator>(), device);
    }
  }

  // 3. Run the CPU kernel as a kernel on the device's current stream.
  launch_kernel(current_stream(device), [&] {
    op.redispatchBoxed(c10::DispatchKeySet(cpu_key), stack);
  });

  // 4. Results back as emu tensors (no copies), out= resizes propagated.
  aliases.sync_inputs();
  const size_t num_returns = schema.returns().size();
  for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
    (*stack)[i] = map_tensors((*stack)[i], [&](const at::Tensor& t) { return aliases.to_emu(t, device); });
  }
}
// LITERALINCLUDE END: FALLBACK_KERNEL

} // namespace

// LITERALINCLUDE START: FALLBACK_REGISTER
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&emu_fallback>());
}
// LITERALINCLUDE END: FALLBACK_REGISTER

// LITERALINCLUDE START: FALLBACK_STRUCTURED
// Structured ops (add, mm, relu...) come with a generic kernel for every
// backend ("CompositeExplicitAutogradNonFunctional") that computes the output
// shape, allocates the output on emu and calls the op's out= form, which then
// reaches the fallback and checks and computes the shape all over again in
// CPU's kernel. Sending the functional and in-place forms to the fallback
// directly runs CPU's kernel once; its output is allocated in device memory.
//
// This runs when the extension module initialises, after every static
// registration of the library: ops with a native emu kernel keep it.
void route_structured_ops_to_fallback() {
  static torch::Library m(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    const auto op = dispatcher.findOp(name);
    if (name.name.rfind("aten::", 0) != 0 || !op ||
        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
        !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      continue;
    }
    std::string unqualified = name.name.substr(6);
    if (!name.overload_name.empty()) {
      unqualified += "." + name.overload_name;
    }
    m.impl(unqualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&emu_fallback>());
    fallback_routed_ops().push_back("aten::" + unqualified);
  }
}
// LITERALINCLUDE END: FALLBACK_STRUCTURED

} // namespace torch_emu
