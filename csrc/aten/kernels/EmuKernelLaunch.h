// Launching a native kernel (EmuKernel.h): the device of its arguments, one
// launch on the current stream that waits (run_on) or is queued (queue_on),
// the arguments a queued or captured kernel keeps, and how they are handed to
// CPU code (generators, host aliases).
#pragma once

#include <ATen/EmptyTensor.h>
#include <ATen/TensorIterator.h>
#include <ATen/TensorMeta.h>
#include <ATen/core/List.h>
#include <c10/util/ExclusivelyOwned.h>
#include <c10/util/MaybeOwned.h>

#include <array>
#include <atomic>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "aten/EmuDeviceCheck.h"
#include "aten/EmuHostAlias.h"
#include "aten/kernels/EmuOps.h"
#include "core/EmuGenerator.h"
#include "core/EmuLaunch.h"
#include "core/EmuStream.h"


namespace torch_emu {
namespace kernel {

// LITERALINCLUDE START: COMMON_DEVICE
// The emu device of a kernel's tensor arguments (EmuDeviceCheck.h: the same
// check and errors as the fallback's).
template <typename... Args>
c10::DeviceIndex common_device(const Args&... args) {
  DeviceCheck check;
  (check.visit(args), ...);
  return check.finish();
}
// LITERALINCLUDE END: COMMON_DEVICE

// LITERALINCLUDE START: RUN_ON
struct NoReplay {};

// Runs fn() as one kernel on the current stream of `device` and returns what it
// returned (a tensor, a reference to one, a tuple). `make_replay` makes it
// capturable into a graph (launch_kernel in EmuLaunch.h); without it a capture
// fails, naming `what`.
template <typename Fn, typename MakeReplay = NoReplay>
decltype(auto) run_on(c10::DeviceIndex device, Fn&& fn, MakeReplay&& make_replay = {},
                      const char* what = __builtin_FUNCTION()) {
  using R = std::invoke_result_t<Fn&>;
  const c10::Stream stream = current_stream(device);
  auto launch = [&](auto&& kernel) {
    if constexpr (std::is_same_v<std::decay_t<MakeReplay>, NoReplay>) {
      launch_kernel(stream, kernel, what);
    } else {
      launch_kernel(stream, kernel, make_replay, what);
    }
  };
  if constexpr (std::is_void_v<R>) {
    launch(fn);
  } else if constexpr (std::is_reference_v<R>) {
    std::remove_reference_t<R>* result = nullptr;
    launch([&] { result = &fn(); });
    return static_cast<R>(*result);
  } else {
    std::optional<R> result;
    launch([&] { result.emplace(fn()); });
    return R(std::move(*result));
  }
}
// LITERALINCLUDE END: RUN_ON

// LITERALINCLUDE START: QUEUE_ON
// Launches fn() as one kernel on the current stream of `device` without
// waiting for the stream (queue_kernel in EmuLaunch.h: queued, or run at once
// when the launch mode's rule says so): for kernels that write into
// tensors that exist already. The queued kernel is `make_owning()`, the same
// closure that replays a captured kernel, so one closure serves both.
template <typename Fn, typename MakeOwning>
void queue_on(c10::DeviceIndex device, Fn&& fn, MakeOwning&& make_owning, const char* what,
              size_t bytes = kUnknownBytes) {
  queue_kernel(current_stream(device), fn, make_owning, what, bytes);
}

// The name a kernel made from `fn` (or structured class `Impl`) reports its
// errors under, taken once per instantiation from the compiler's name of
// kernel_name itself ("... [with auto fn = &at::native::index_select_cpu_]").
std::string name_in_signature(std::string_view pretty, std::string_view parameter);

template <auto fn>
const char* kernel_name() {
  static const std::string name = name_in_signature(__PRETTY_FUNCTION__, "fn = ");
  return name.c_str();
}
template <typename Impl>
const char* kernel_name() {
  static const std::string name = name_in_signature(__PRETTY_FUNCTION__, "Impl = ");
  return name.c_str();
}

// Random kernels draw from a generator when they run: launched, they take
// their place in the order of the generator's draws (EmuGenerator.h), so that
// a queued one draws what it would have drawn at its call.
template <typename... Args>
inline constexpr bool draws_random_numbers =
    (std::is_same_v<std::decay_t<Args>, std::optional<at::Generator>> || ...);

template <typename... Args>
void order_draws(c10::DeviceIndex device, const Args&... args) {
  const c10::Stream stream = current_stream(device);
  auto order = [&](const auto& arg) {
    if constexpr (std::is_same_v<std::decay_t<decltype(arg)>, std::optional<at::Generator>>) {
      emu_generator_for(arg, device)->draw_on(stream);
    }
  };
  (order(args), ...);
}
// LITERALINCLUDE END: QUEUE_ON

// LITERALINCLUDE START: KEEP_ARGS
// A captured kernel runs again at each replay of its graph, after the call
// that launched it has returned: its replay closure keeps owning copies of the
// arguments (keep) and hands them to the CPU function in its types (borrow).
// Tensors are shared, not copied: the replay works on the same memory, without
// their autograd history (which would keep the capture's autograd graph alive).
template <typename T>
std::decay_t<T> keep(const T& x) {
  return x;
}
// A queued kernel (queue_kernel in EmuLaunch.h) holds emu memory without
// owning it, as a GPU kernel does, and a copy of a host tensor (a CPU scalar
// operand), which the host may change once the launch has returned.
inline at::Tensor keep(const at::Tensor& x) {
  if (!x.defined()) {
    return x;
  }
  if (making_queued_kernel() && x.layout() == at::kStrided && !x.is_quantized() && x.has_storage()) {
    if (x.device().type() != c10::DeviceType::PrivateUse1) {
      at::Tensor copy = x.detach().clone();
      copy.unsafeGetTensorImpl()->set_wrapped_number(x.unsafeGetTensorImpl()->is_wrapped_number());
      return copy;
    }
    return tensor_over(queued_view_of(x.storage()), c10::DeviceType::PrivateUse1, x.dtype(), x);
  }
  return x.variable_data();
}
inline std::optional<at::Tensor> keep(const std::optional<at::Tensor>& x) {
  return x.has_value() ? std::optional<at::Tensor>(keep(*x)) : std::nullopt;
}
template <typename E>
std::vector<E> keep(c10::ArrayRef<E> x) {
  return x.vec();
}
template <typename E>
std::optional<std::vector<E>> keep(const c10::OptionalArrayRef<E>& x) {
  return x.has_value() ? std::optional<std::vector<E>>(x->vec()) : std::nullopt;
}
inline std::string keep(std::string_view x) {
  return std::string(x);
}
inline std::vector<at::Tensor> keep(const at::ITensorListRef& x) {
  std::vector<at::Tensor> kept;
  for (const at::Tensor& t : x) {
    kept.push_back(keep(t));
  }
  return kept;
}
inline std::vector<at::Tensor> keep(at::TensorList x) {
  return keep(at::ITensorListRef(x));
}

// A TensorIterator (a DispatchStub's argument): a copy of its geometry whose
// operands are kept as tensors are; the data pointers it computed stay
// those of the same memory. Only for iterators over emu tensors: a kept host
// tensor is a copy, elsewhere.
inline at::TensorIterator keep(const at::TensorIteratorBase& iter) {
  at::TensorIterator kept(iter);
  for (int i = 0; i < kept.ntensors(); ++i) {
    at::OperandInfo& op = kept.operand(i);
    op.tensor(c10::MaybeOwned<at::TensorBase>::owned(keep(op.tensor())));
  }
  return kept;
}
inline at::TensorIterator keep(const at::TensorIterator& iter) {
  return keep(static_cast<const at::TensorIteratorBase&>(iter));
}

template <typename T>
T& borrow(T& x) {
  return x;
}
template <typename E>
c10::OptionalArrayRef<E> borrow(std::optional<std::vector<E>>& x) {
  return x.has_value() ? c10::OptionalArrayRef<E>(*x) : c10::OptionalArrayRef<E>();
}
// LITERALINCLUDE END: KEEP_ARGS

// CPU kernels draw random numbers from CPU generators: an emu generator
// argument (or none: the device's default) becomes the CPU generator behind it.
template <typename T>
decltype(auto) kernel_arg(T&& arg, c10::DeviceIndex device) {
  if constexpr (std::is_same_v<std::decay_t<T>, std::optional<at::Generator>>) {
    return std::optional<at::Generator>(cpu_generator_for(arg, device));
  } else {
    return std::forward<T>(arg);
  }
}

// The bytes of a kernel's tensor arguments, which it reads or writes: the
// measure of its cost queue_kernel takes (EmuLaunch.h).
inline size_t bytes_of(const at::Tensor& t) {
  return t.defined() ? t.nbytes() : 0;
}
inline size_t bytes_of(const std::optional<at::Tensor>& t) {
  return t.has_value() ? bytes_of(*t) : 0;
}
template <typename T>
size_t bytes_of(const T&) {
  return 0;
}
template <typename... Args>
size_t tensor_bytes(const Args&... args) {
  return (size_t{0} + ... + bytes_of(args));
}

// A kernel that picks rows of its first operand (gather, index_select, x[i])
// reads of it as many bytes as it writes, not the whole table: a lookup of a
// few rows in a large embedding is a short kernel. Such a structured kernel's
// file says so by setting this for its class (cat, x[i] and index_select
// count their bytes where they launch).
template <typename Impl>
inline constexpr bool picks_rows = false;

// Emu tensors become host aliases, everything else passes through. (One
// function with `if constexpr`, not overloads: a template overload would win
// for a non-const `at::Tensor&` and pass it through unaliased.)
template <typename T>
decltype(auto) host_arg(HostAliases& aliases, T&& arg) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, at::Tensor>) {
    return arg.defined() && arg.device().type() == c10::DeviceType::PrivateUse1 ? aliases.alias(arg) : at::Tensor(arg);
  } else if constexpr (std::is_same_v<D, std::optional<at::Tensor>>) {
    return aliases.alias(arg);
  } else {
    return std::forward<T>(arg);
  }
}

} // namespace kernel
} // namespace torch_emu
