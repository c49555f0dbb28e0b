// The global fallback: any aten op without an emu kernel runs PyTorch's own
// CPU kernel directly on the device memory, as a kernel on the current emu
// stream. Inputs are aliased (HostAliases), outputs are allocated in device
// memory by the kernel-aware CPU allocator, so nothing is copied.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <chrono>
#include <functional>
#include <memory>

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

// LITERALINCLUDE START: FALLBACK_HOST_INDICES
// Ops that, like CUDA's, take host index tensors (their `indices` argument)
// beside device tensors. The tensor indexed must be on the device: a host
// tensor indexed by emu indices reaches emu only because its indices are
// there, and CUDA's index refuses it with this RuntimeError (the check of its
// meta function, which PyTorch's test_advancedindex_mixed_devices_error expects).
bool takes_host_indices(const c10::OperatorName& name) {
  return name.name == "aten::index" || name.name == "aten::index_put_" ||
      name.name == "aten::index_put" || name.name == "aten::_index_put_impl_";
}

void check_indexed_on_device(const at::Tensor& self) {
  TORCH_CHECK(is_emu(self), "indices should be either on ", c10::DeviceType::CPU,
              " or on the same device as the indexed tensor (", self.device(), ")");
}
// LITERALINCLUDE END: FALLBACK_HOST_INDICES

// A few out= forms are a CompositeExplicitAutograd kernel that refuses every device but CPU, CUDA
// and XPU ("mode only supports CPU, CUDA and XPU device type"): they also run CPU's kernel (that
// same composite kernel, which the dispatcher picks for the CPU key).
bool checks_for_builtin_devices(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.schema().operator_name();
  return name.name == "aten::mode" && name.overload_name == "values";
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

void run_on_device(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DispatchKey cpu_key);

} // namespace

// LITERALINCLUDE START: FALLBACK_WATCH
// The boxed fallback. Usually it just runs the op; when a vendor asked for a
// fallback report (or for fallbacks to be errors) it is timed or refused.
// `keys` names the emu key it runs for (PrivateUse1, QuantizedPrivateUse1,
// SparsePrivateUse1...): the CPU kernel is the one of the same functionality
// (Dense, Quantized, Sparse...) for the CPU backend.
void emu_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const c10::DispatchKey cpu_key = c10::toRuntimePerBackendFunctionalityKey(
      c10::toFunctionalityKey(keys.highestPriorityTypeId()), c10::BackendComponent::CPUBit);
  if (C10_LIKELY(!fallback_watched())) {
    run_on_device(op, stack, cpu_key);
    return;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(!fallback_is_error(), "'", op.schema().operator_name(),
                              "' has no emu kernel and fallbacks are errors (TORCH_EMU_FALLBACK_ERROR=1 "
                              "or torch_emu.tools.fallback_report(error=True))");
  const auto start = std::chrono::steady_clock::now();
  run_on_device(op, stack, cpu_key);
  record_fallback(op.schema().operator_name(),
                  std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}
// LITERALINCLUDE END: FALLBACK_WATCH

namespace {

// LITERALINCLUDE START: FALLBACK_HOST_OBJECTS
// Ops that return an opaque object (the packed weights made by
// quantized::linear_prepack, conv2d_prepack...) keep their tensor arguments,
// or pointers into them, inside the object after they return, and host
// aliases of device memory must not outlive their launch. These ops run on
// the host, on host copies of their emu tensors: the object is a host object,
// which the kernels taking it read inside their own launches.
bool returns_object(const c10::FunctionSchema& schema) {
  for (const c10::Argument& ret : schema.returns()) {
    if (ret.type()->kind() == c10::TypeKind::ClassType) {
      return true;
    }
  }
  return false;
}

void run_on_host_copies(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DispatchKey cpu_key) {
  const size_t num_args = op.schema().arguments().size();
  for (size_t i = stack->size() - num_args; i < stack->size(); ++i) {
    c10::IValue& arg = (*stack)[i];
    if (arg.isDevice() && arg.toDevice().type() == c10::DeviceType::PrivateUse1) {
      arg = c10::Device(c10::DeviceType::CPU);
    } else {
      arg = map_tensors(arg, [](const at::Tensor& t) { return is_emu(t) ? t.cpu() : t; });
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(cpu_key), stack);
}
// LITERALINCLUDE END: FALLBACK_HOST_OBJECTS

// LITERALINCLUDE START: FALLBACK_KERNEL
void run_on_device(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DispatchKey cpu_key) {
  const auto& schema = op.schema();
  const size_t num_args = schema.arguments().size();
  const auto args = torch::jit::last(*stack, num_args);
  TORCH_CHECK_NOT_IMPLEMENTED(op.hasKernelForDispatchKey(cpu_key) || checks_for_builtin_devices(op),
                              "The operator '", schema.operator_name(),
                              "' is not implemented for emu",
                              cpu_key == c10::DispatchKey::CPU ? "" : " tensors of this layout",
                              ": it has neither an emu kernel nor a ", cpu_key, " kernel for the emu fallback to run.");

  // 1. Which device runs it (and no tensors on two devices).
  DeviceCheck check;
  const bool host_indices = takes_host_indices(schema.operator_name());
  for (size_t i = 0; i < num_args; ++i) {
    const bool indices = host_indices && schema.arguments()[i].name() == "indices";
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      if (!indices || is_emu(t)) {
        check.visit(t);
      }
    });
  }
  if (host_indices) {
    check_indexed_on_device(args[0].toTensor());
  }
  const bool no_emu_tensor = check.index < 0;
  c10::DeviceIndex device = check.finish(schema.operator_name().name.c_str());
  if (returns_object(schema)) {
    run_on_host_copies(op, stack, cpu_key);
    return;
  }

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
      EmuGeneratorImpl* gen = emu_generator_for(arg.toOptional<at::Generator>(), device);
      gen->draw_on(current_stream(device)); // after draws queued on other streams
      arg = gen->cpu_generator();
    }
  }

  // 3. Run the CPU kernel as a kernel on the device's current stream. In a
  // graph, a replay runs it again on a copy of the rewritten arguments, their
  // emu storages kept alive.
  launch_kernel(
      current_stream(device), [&] { op.redispatchBoxed(c10::DispatchKeySet(cpu_key), stack); },
      [&]() -> std::function<void()> {
        return [op, cpu_key, memory = aliases.emu_storages(), args = std::vector<c10::IValue>(args.begin(), args.end())] {
          torch::jit::Stack replay_stack(args);
          op.redispatchBoxed(c10::DispatchKeySet(cpu_key), &replay_stack);
        };
      },
      schema.operator_name().name.c_str());

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

std::vector<std::string> route_to_fallback(c10::DispatchKey emu_key, bool (*wanted)(const c10::OperatorHandle&)) {
  // One library per key, alive for the process as static registrations are.
  static std::vector<std::unique_ptr<torch::Library>> libraries;
  libraries.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "aten", emu_key, __FILE__, __LINE__));
  std::vector<std::string> routed;
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    const auto op = dispatcher.findOp(name);
    if (name.name.rfind("aten::", 0) != 0 || !op || op->hasKernelForDispatchKey(emu_key) || !wanted(*op)) {
      continue;
    }
    const std::string unqualified =
        name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
    libraries.back()->impl(unqualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&emu_fallback>());
    routed.push_back(name.name + (name.overload_name.empty() ? "" : "." + name.overload_name));
  }
  return routed;
}

// LITERALINCLUDE START: FALLBACK_STRUCTURED
// Structured ops (add, mm, relu...) come with a generic kernel for every
// backend ("CompositeExplicitAutogradNonFunctional") that computes the output
// shape, allocates the output on emu and calls the op's out= form, which then
// reaches the fallback and checks and computes the shape all over again in
// CPU's kernel. Sending the functional and in-place forms to the fallback
// directly runs CPU's kernel once; its output is allocated in device memory.
//
// Quantized tensors (QuantizedPrivateUse1) get the same generic kernels, which
// cannot make quantized outputs: ops QuantizedCPU implements (cat, comparisons,
// upsampling...) go to the quantized fallback instead.
template <c10::DispatchKey cpu_key>
bool structured_with_kernel_for(const c10::OperatorHandle& op) {
  return op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) &&
      op.hasKernelForDispatchKey(cpu_key);
}

// A few ops (addr, native_group_norm, _stack, any/all.dims_out) have a CPU kernel and, for every
// other backend, a decomposition (CompositeExplicitAutograd) that the dispatcher prefers to a
// backend fallback: emu would round differently from CPU (addr and group_norm in bfloat16). Like
// every op CPU implements, they run CPU's kernel through the fallback; so do the out= forms that
// check for built-in devices (checks_for_builtin_devices).
bool cpu_kernel_or_structured(const c10::OperatorHandle& op) {
  return structured_with_kernel_for<c10::DispatchKey::CPU>(op) ||
      (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
       op.hasKernelForDispatchKey(c10::DispatchKey::CPU)) ||
      checks_for_builtin_devices(op);
}

void route_structured_ops_to_fallback() {
  fallback_routed_ops() = route_to_fallback(c10::DispatchKey::PrivateUse1, &cpu_kernel_or_structured);
  route_to_fallback(c10::DispatchKey::QuantizedPrivateUse1, &structured_with_kernel_for<c10::DispatchKey::QuantizedCPU>);
}
// LITERALINCLUDE END: FALLBACK_STRUCTURED

} // namespace torch_emu
