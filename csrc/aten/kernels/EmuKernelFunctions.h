// Native kernels from plain CPU functions (EmuKernel.h): OnDevice<fn> for
// functions that allocate their outputs like their inputs, OnHost<fn> for
// those that insist on CPU tensors.
#pragma once

#include "aten/kernels/EmuKernelLaunch.h"
#include "core/EmuKernelAllocator.h"

namespace torch_emu {
namespace kernel {

// LITERALINCLUDE START: ON_DEVICE
// A CPU function that allocates its outputs with its inputs' options (so they
// land on emu) and only touches memory through data pointers, run as the emu
// kernel of its op: OnDevice<&at::native::layer_norm_cpu>::call.
template <auto fn>
struct OnDevice;

template <typename R, typename... Args, R (*fn)(Args...)>
struct OnDevice<fn> {
  // A void function fills tensors it is given; a random fill (normal_,
  // random_...) fills its first argument and returns it: both are queued.
  static constexpr bool kQueued = std::is_void_v<R> || draws_random_numbers<Args...>;

  static R call(Args... args) {
    if constexpr (kQueued) {
      const size_t bytes = tensor_bytes(args...);
      return call_as(kernel_name<fn>(), bytes, std::forward<Args>(args)...);
    } else {
      const c10::DeviceIndex device = common_device(args...);
      return run_on(
          device, [&]() -> R { return fn(kernel_arg(std::forward<Args>(args), device)...); },
          [&] { return replay(device, args...); }, kernel_name<fn>());
    }
  }

  // A queued one under the name `what` (its errors', its op's), costing
  // `bytes` (queue_kernel's measure) where the bytes of its tensors overstate
  // it: a lookup reads only the rows it picks (index_select).
  static R call_as(const char* what, size_t bytes, Args... args) {
    static_assert(kQueued, "only a queued kernel has a cost");
    const c10::DeviceIndex device = common_device(args...);
    order_draws(device, args...);
    queue_on(
        device, [&] { fn(kernel_arg(std::forward<Args>(args), device)...); },
        [&] { return replay(device, args...); }, what, bytes);
    if constexpr (!std::is_void_v<R>) {
      static_assert(std::is_same_v<R, at::Tensor&> &&
                    std::is_same_v<std::tuple_element_t<0, std::tuple<Args...>>, at::Tensor&>);
      return std::get<0>(std::forward_as_tuple(args...));
    }
  }

 private:
  // Calls fn again on kept arguments; its outputs get the memory they got
  // when captured (allocate_device in EmuKernelAllocator.h), so they are dropped.
  static std::function<void()> replay(c10::DeviceIndex device, const std::decay_t<Args>&... args) {
    return [device, kept = std::make_tuple(keep(args)...)]() mutable {
      std::apply([&](auto&... a) { (void)fn(kernel_arg(borrow(a), device)...); }, kept);
    };
  }
};
// LITERALINCLUDE END: ON_DEVICE

// LITERALINCLUDE START: INTO_RESULT
// A CPU function that allocates its one result inside (so OnDevice waits for
// it), when the host knows that result's sizes and dtype from the arguments:
// the caller allocates the result at the call, and the kernel is queued. The
// kernel lends the result's memory to the function's first allocation of its
// size (KernelBlocksScope, which graphs use to replay), so the function
// writes its result in place; were it to land elsewhere, it is copied in.
// Only for functions whose result does not depend on how many threads run
// them: queued, a kernel runs on the stream's worker and its team (one
// thread on two cores), where CPU's runs with all of them. (Convolutions,
// whose weight gradients split their sums among the threads, wait.)
template <auto fn>
struct IntoResult;

template <typename... Args, at::Tensor (*fn)(Args...)>
struct IntoResult<fn> {
  static at::Tensor call(c10::DeviceIndex device, at::Tensor result, Args... args) {
    static_assert(!draws_random_numbers<Args...>);
    queue_on(
        device, [&] { fill(result, args...); },
        [&] {
          return [kept = std::make_tuple(keep(result), keep(args)...)]() mutable {
            std::apply([](const at::Tensor& r, auto&... a) { fill(r, borrow(a)...); }, kept);
          };
        },
        kernel_name<fn>(), result.nbytes() + tensor_bytes(args...));
    return result;
  }

 private:
  template <typename... A>
  static void fill(const at::Tensor& result, A&&... args) {
    KernelBlocks lent{{{result.data_ptr(), result.nbytes()}}, result.device().index()};
    at::Tensor made;
    {
      const KernelBlocksScope lend(lent, KernelBlocksScope::kReplay);
      made = fn(std::forward<A>(args)...);
    }
    if (made.data_ptr() != result.data_ptr() || !made.strides().equals(result.strides())) {
      result.copy_(made);
    }
  }
};
// LITERALINCLUDE END: INTO_RESULT

// LITERALINCLUDE START: ON_HOST
// A CPU function that insists on CPU tensors (checkBackend, or host copies it
// iterates together with its inputs): run on host aliases of its emu
// arguments. Tensors it returns (emu memory, allocated inside the launch)
// become emu tensors; an in-place function returns its emu `self`.
inline at::Tensor to_emu_result(HostAliases& aliases, const at::Tensor& t, c10::DeviceIndex device) {
  return aliases.to_emu(t, device);
}
template <typename... T>
std::tuple<T...> to_emu_result(HostAliases& aliases, const std::tuple<T...>& t, c10::DeviceIndex device) {
  return std::apply([&](const auto&... x) { return std::make_tuple(aliases.to_emu(x, device)...); }, t);
}

template <auto fn>
struct OnHost;

template <typename R, typename First, typename... Rest, R (*fn)(First, Rest...)>
struct OnHost<fn> {
  static R call(First first, Rest... rest) {
    const c10::DeviceIndex device = common_device(first, rest...);
    auto make_replay = [&] { return replay(device, first, rest...); };
    if constexpr (std::is_same_v<R, at::Tensor&>) {
      auto kernel = [&] {
        HostAliases aliases;
        at::Tensor host_first = host_arg(aliases, first);
        fn(host_first, kernel_arg(host_arg(aliases, rest), device)...);
      };
      order_draws(device, rest...);
      queue_on(device, kernel, make_replay, kernel_name<fn>(), tensor_bytes(first, rest...));
      return first;
    } else {
      return run_on(
          device,
          [&]() -> R {
            HostAliases aliases;
            return to_emu_result(
                aliases, fn(host_arg(aliases, first), kernel_arg(host_arg(aliases, rest), device)...), device);
          },
          make_replay, kernel_name<fn>());
    }
  }

 private:
  static std::function<void()> replay(c10::DeviceIndex device, const std::decay_t<First>& first,
                                      const std::decay_t<Rest>&... rest) {
    return [device, kept = std::make_tuple(keep(first), keep(rest)...)]() mutable {
      std::apply(
          [&](auto& f, auto&... r) {
            HostAliases aliases;
            auto host_first = host_arg(aliases, borrow(f));
            (void)fn(host_first, kernel_arg(host_arg(aliases, borrow(r)), device)...);
          },
          kept);
    };
  }
};
// LITERALINCLUDE END: ON_HOST

} // namespace kernel
} // namespace torch_emu
