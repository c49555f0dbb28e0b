// Native kernels from PyTorch's structured CPU kernels (EmuKernel.h):
// Structured<Impl>::functional / ::inplace, with outputs allocated on emu from
// meta() and impl() as the kernel.
#pragma once

#include "aten/kernels/EmuKernelLaunch.h"

namespace torch_emu {
namespace kernel {

// LITERALINCLUDE START: STRUCTURED
// A few meta() argument types differ from the op's schema types; the kernel
// takes the schema type and hands meta() and impl() its own.
template <typename T>
struct SchemaArg {
  using type = T;
  static T to_meta(T x) { return x; }
};
template <>
struct SchemaArg<at::OptionalTensorRef> {
  using type = const std::optional<at::Tensor>&;
  static at::OptionalTensorRef to_meta(type t) {
    return t.has_value() && t->defined() ? at::OptionalTensorRef(*t) : at::OptionalTensorRef();
  }
};
template <>
struct SchemaArg<at::OptionalScalarRef> {
  using type = const std::optional<at::Scalar>&;
  static at::OptionalScalarRef to_meta(type s) {
    return s.has_value() ? at::OptionalScalarRef(*s) : at::OptionalScalarRef();
  }
};

// A new output of a structured op; empty strides mean contiguous.
at::Tensor new_output(c10::IntArrayRef sizes, c10::IntArrayRef strides, const at::TensorOptions& options);
at::Tensor host_output(c10::IntArrayRef sizes, c10::IntArrayRef strides, const at::TensorOptions& options);

// LITERALINCLUDE START: DTYPE_CHECK
// CPU's kernels refuse a dtype they lack before they touch any data (their
// AT_DISPATCH: '"lt_cpu" not implemented for 'ComplexFloat''), which CUDA
// raises at the call too; a queued kernel would report it at the next sync.
// So the first launch of a structured kernel for each combination of its
// arguments' dtypes first runs CPU's kernel on the host, on empty CPU
// tensors of those dtypes and ranks (stand-ins), and raises what it raises if
// that is a NotImplementedError (other errors of such a run are the
// stand-ins' shapes, not the arguments', and are ignored, as are warnings). Later launches with
// the same dtypes cost one hash and one atomic load.
uint64_t dtypes_key_of(std::initializer_list<uint64_t> parts);
inline uint64_t dtype_part(const at::Tensor& t) {
  return t.defined() ? 1 + static_cast<uint64_t>(t.scalar_type()) * 4 + (t.dim() == 0) * 2 +
                           t.unsafeGetTensorImpl()->is_wrapped_number()
                     : 0;
}
inline uint64_t dtype_part(const std::optional<at::Tensor>& t) {
  return t.has_value() ? dtype_part(*t) : 0;
}
inline uint64_t dtype_part(const at::Scalar& s) {
  return 1000 + static_cast<uint64_t>(s.type());
}
inline uint64_t dtype_part(const std::optional<at::Scalar>& s) {
  return s.has_value() ? dtype_part(*s) : 0;
}
template <typename T>
uint64_t dtype_part(const T&) {
  return 0;
}

// The dtype combinations one kernel has already been checked for.
class CheckedDtypes {
 public:
  bool contains(uint64_t key) const;
  void add(uint64_t key);

 private:
  std::atomic<uint64_t> last_{0};
  mutable std::mutex mutex_;
  std::vector<uint64_t> keys_;
};

// A CPU tensor of zeros standing in for an argument: same dtype and rank,
// every dimension of `size` (a 0-dim one keeps its wrapped-number flag).
at::Tensor stand_in(const at::Tensor& t, int64_t size);
inline std::optional<at::Tensor> stand_in(const std::optional<at::Tensor>& t, int64_t size) {
  return t.has_value() ? std::optional<at::Tensor>(stand_in(*t, size)) : std::nullopt;
}
template <typename T>
const T& stand_in(const T& x, int64_t) {
  return x;
}

// Runs `dry_run` with warnings kept from the user; rethrows a NotImplementedError,
// or every error when `all_errors` (kernels marked below).
void run_dtype_check(c10::function_ref<void()> dry_run, bool all_errors);

// Kernels whose every check on stand-ins is one on the arguments: the matrix
// products check their dtypes in impl() ("expected m1 and m2 to have the same
// dtype"), some only once they have data. Their stand-ins have every
// dimension 1 (not 0), which keeps the shapes of a matrix product compatible.
template <typename Impl>
inline constexpr bool stand_in_errors_are_real = false;
// LITERALINCLUDE END: DTYPE_CHECK

// The outputs of a structured op's functional form, allocated on emu with
// the geometry meta() asks for (on the host for a dtype check, below).
template <typename Impl, size_t N, bool kOnHost = false>
struct NewOutputs final : Impl {
  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          at::TensorOptions options) override {
    set_output_raw_strided(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              at::TensorOptions options) override {
    outputs[i] = kOnHost ? host_output(sizes, strides, options) : new_output(sizes, strides, options);
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Impl>) {
      Impl::set_output_raw_strided(i, sizes, strides, options); // after: it reads maybe_get_output
    }
  }
  const at::Tensor& maybe_get_output(int64_t i) override {
    return *outputs[i];
  }
  std::array<c10::ExclusivelyOwned<at::Tensor>, N> outputs;

  // What the kernel writes.
  size_t nbytes() const {
    size_t total = 0;
    for (const auto& out : outputs) {
      total += out->defined() ? out->nbytes() : 0;
    }
    return total;
  }
};

void check_inplace(const at::Tensor& self, c10::IntArrayRef sizes, const at::TensorOptions& options);
// CPU's out= kernels' checks and resizing (torchgen's resize_out).
void resize_out(const at::Tensor& out, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                const at::TensorOptions& options);

// The output of a structured op's in-place form (`self`: kOut false) or of
// its out= form (`out`, resized and checked as CPU's out= kernels do); when
// the kernel needs other strides than the target's, it writes a proxy that
// is copied back.
template <typename Impl, bool kOut>
struct IntoOutput final : Impl {
  explicit IntoOutput(const at::Tensor& target) : target(target) {}
  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          at::TensorOptions options) override {
    check(sizes, strides, options);
    if (!strides.empty() && !target.strides().equals(strides)) {
      proxy = new_output(sizes, strides, options);
    }
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Impl>) {
      Impl::set_output_raw_strided(i, sizes, strides, options);
    }
  }
  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              at::TensorOptions options) override {
    check(sizes, strides, options);
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Impl>) {
      Impl::set_output_raw_strided(i, sizes, strides, options);
    }
  }
  const at::Tensor& maybe_get_output(int64_t) override {
    return proxy.has_value() ? *proxy : target;
  }
  void check(c10::IntArrayRef sizes, c10::IntArrayRef strides, const at::TensorOptions& options) const {
    if constexpr (kOut) {
      resize_out(target, sizes, strides, options);
    } else {
      check_inplace(target, sizes, options);
    }
  }
  const at::Tensor& target;
  std::optional<at::Tensor> proxy;
};
template <typename Impl>
using SelfOutput = IntoOutput<Impl, /*kOut=*/false>;
template <typename Impl>
using OutOutput = IntoOutput<Impl, /*kOut=*/true>;

// The outputs of a replayed functional form: those it made when captured.
template <typename Impl, size_t N>
struct KnownOutputs final : Impl {
  explicit KnownOutputs(const std::array<at::Tensor, N>& outputs) : outputs(outputs) {}
  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          at::TensorOptions options) override {
    set_output_raw_strided(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              at::TensorOptions options) override {
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Impl>) {
      Impl::set_output_raw_strided(i, sizes, strides, options);
    }
  }
  const at::Tensor& maybe_get_output(int64_t i) override {
    return outputs[i];
  }
  std::array<at::Tensor, N> outputs;
};

// Whether the CPU kernel of an iterator can run on the emu tensors as they
// are. Only an iterator whose device is CPU converts inputs to the common
// dtype (1 + 2.5j, int + float...); on emu those calls run on host aliases.
template <typename Impl>
bool runs_as_is(const Impl& op) {
  if constexpr (std::is_base_of_v<at::TensorIteratorBase, Impl>) {
    const std::optional<at::ScalarType> common = op.maybe_common_dtype();
    for (int i = op.noutputs(); common.has_value() && i < op.ntensors(); ++i) {
      if (op.dtype(i) != *common) return false;
    }
  }
  return true;
}

// A queued kernel runs the op's meta() again when it runs, which reads the
// default dtype then, not at the call: an iterator that promotes integer
// inputs to a float that no input tensor has (int / int, int * 2.5: a Python
// number is a wrapped number) computes in the default float dtype, and
// `with set_default_dtype(torch.double)` may have ended by then. Such a kernel
// waits, so that it runs under the call's default dtype. (float * bool, as in
// dropout, takes its dtype from the float tensor: it is queued.)
template <typename Impl>
bool promotes_integers_to_float(const Impl& op) {
  if constexpr (std::is_base_of_v<at::TensorIteratorBase, Impl>) {
    const std::optional<at::ScalarType> common = op.maybe_common_dtype();
    if (!common.has_value() || !(at::isFloatingType(*common) || at::isComplexType(*common))) {
      return false;
    }
    bool integral = false;
    for (int i = op.noutputs(); i < op.ntensors(); ++i) {
      if (at::isIntegralType(op.dtype(i), /*includeBool=*/true)) {
        integral = true;
      } else if (!op.tensor_base(i).unsafeGetTensorImpl()->is_wrapped_number()) {
        return false; // a floating input tensor decides the dtype
      }
    }
    return integral;
  }
  return false;
}

// LITERALINCLUDE START: ONEDNN_ON_HOST
// Some CPU kernels take a path of their own for CPU tensors in bfloat16 and
// float16, which emu must take too to round as CPU does. CPU's batched matrix
// products hand that work to oneDNN, which insists on CPU tensors; on any
// other tensor it fails, and the kernel turns oneDNN off for the whole
// process before taking its own path (so LSTMs and CPU matmuls lose oneDNN
// too). sum accumulates some strided inputs in a float buffer on CPU only
// (should_use_acc_buffer). Ops marked here run on host aliases in those
// dtypes: they take CPU's path, and leave every setting alone.
template <typename Impl>
inline constexpr bool cpu_path_in_low_precision = false;
// Ops whose impl() takes CPU's path only for CPU tensors (gelu's oneDNN
// erf): always on host aliases, to round as CPU does.
template <typename Impl>
inline constexpr bool cpu_path_on_cpu_tensors_only = false;

template <typename Impl, typename S>
bool needs_host_tensors(const S& self) {
  if constexpr (cpu_path_on_cpu_tensors_only<Impl>) {
    return true;
  } else if constexpr (cpu_path_in_low_precision<Impl>) {
    return self.scalar_type() == at::kBFloat16 || self.scalar_type() == at::kHalf;
  }
  return false;
}
// LITERALINCLUDE END: ONEDNN_ON_HOST

// A Python number (a 0-dim "wrapped number" host tensor, double or int64)
// with a same-kind emu tensor is converted to that tensor's dtype up front,
// as CPU's iterator would, so that `x * 2.0` runs as is.
// Borrowed when nothing changes: a copy of a tensor Python owns takes the GIL
// twice (its PyObject is kept alive while C++ shares it), the cost of a small op.
c10::MaybeOwned<at::Tensor> match_wrapped_number(const at::Tensor& t, const at::Tensor& like);

template <typename T>
decltype(auto) with_dtype_of(T&& arg, const at::Tensor& like) {
  if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) {
    return match_wrapped_number(arg, like);
  } else {
    return std::forward<T>(arg);
  }
}
// with_dtype_of's result as the argument itself (it lives to the end of the call's full expression).
template <typename T>
decltype(auto) unwrap(T&& x) {
  if constexpr (std::is_same_v<std::decay_t<T>, c10::MaybeOwned<at::Tensor>>) {
    return static_cast<const at::Tensor&>(*x);
  } else {
    return std::forward<T>(x);
  }
}

// Structured<Impl>: the functional and in-place emu kernels of the structured
// op whose CPU kernel class is Impl (e.g. at::native::structured_mul_out),
// with N outputs. The argument types come from Impl's meta().
template <typename Impl, size_t N = 1, typename Meta = decltype(&Impl::meta)>
struct Structured;

template <typename Impl, size_t N, typename Base, typename Self, typename... Rest>
struct Structured<Impl, N, void (Base::*)(Self, Rest...)> {
  static auto functional(typename SchemaArg<Self>::type self, typename SchemaArg<Rest>::type... rest) {
    const c10::DeviceIndex device = common_device(self, rest...);
    check_dtypes_once(self, rest...);
    return functional_on(device, unwrap(with_dtype_of(self, self)), unwrap(with_dtype_of(rest, self))...);
  }

  // The out= form (mm.out...): the kernel writes into `out`, which exists by
  // the launch, so it is queued like the in-place form.
  static at::Tensor& out(typename SchemaArg<Self>::type self, typename SchemaArg<Rest>::type... rest,
                         at::Tensor& out) {
    const c10::DeviceIndex device = common_device(self, rest..., out);
    check_dtypes_once(self, rest...);
    if (!out_as_is(device, out, self, rest...)) {
      queue_on(
          device,
          [&] {
            HostAliases aliases;
            out_as_is(-1, aliases.alias(out), host_arg(aliases, self), host_arg(aliases, rest)...);
          },
          [&] { return replay_out(/*on_host=*/true, out, self, rest...); }, kernel_name<Impl>(),
          tensor_bytes(out, self, rest...));
    }
    return out;
  }

  static at::Tensor& inplace(at::Tensor& self, typename SchemaArg<Rest>::type... rest) {
    const c10::DeviceIndex device = common_device(self, rest...);
    check_dtypes_once(self, rest...);
    if (!inplace_as_is(device, self, unwrap(with_dtype_of(rest, self))...)) {
      queue_on(
          device,
          [&] {
            HostAliases aliases;
            inplace_as_is(-1, aliases.alias(self), host_arg(aliases, rest)...);
          },
          [&] { return replay_inplace(/*on_host=*/true, self, rest...); }, kernel_name<Impl>(),
          tensor_bytes(self, rest...));
    }
    return self;
  }

 private:
  // Runs the in-place kernel on `self` (a launch on `device`, or inside the
  // current launch if device < 0) unless its iterator cannot run as is.
  template <typename... R>
  static bool inplace_as_is(c10::DeviceIndex device, const at::Tensor& self, const R&... rest) {
    SelfOutput<Impl> op(self);
    op.meta(self, SchemaArg<Rest>::to_meta(rest)...);
    if (device >= 0 && (!runs_as_is(op) || needs_host_tensors<Impl>(self))) {
      return false;
    }
    auto kernel = [&] {
      op.impl(self, SchemaArg<Rest>::to_meta(rest)..., op.maybe_get_output(0));
      if (op.proxy.has_value()) {
        self.copy_(*op.proxy);
      }
    };
    if (device >= 0) {
      queue_on(
          device, kernel, [&] { return replay_inplace(/*on_host=*/false, self, rest...); }, kernel_name<Impl>(),
          tensor_bytes(self, rest...));
    } else {
      kernel();
    }
    return true;
  }

  // Runs the out= kernel into `out` (a launch on `device`, or inside the
  // current launch if device < 0) unless its iterator cannot run as is.
  template <typename S, typename... R>
  static bool out_as_is(c10::DeviceIndex device, const at::Tensor& out, const S& self, const R&... rest) {
    OutOutput<Impl> op(out);
    op.meta(SchemaArg<Self>::to_meta(self), SchemaArg<Rest>::to_meta(rest)...);
    if (device >= 0 && (!runs_as_is(op) || needs_host_tensors<Impl>(self))) {
      return false;
    }
    auto kernel = [&] {
      op.impl(SchemaArg<Self>::to_meta(self), SchemaArg<Rest>::to_meta(rest)..., op.maybe_get_output(0));
      if (op.proxy.has_value()) {
        out.copy_(*op.proxy);
      }
    };
    if (device >= 0) {
      queue_on(
          device, kernel, [&] { return replay_out(/*on_host=*/false, out, self, rest...); }, kernel_name<Impl>(),
          tensor_bytes(out, self, rest...));
    } else {
      kernel();
    }
    return true;
  }

  template <typename... A>
  static std::function<void()> replay_out(bool on_host, const at::Tensor& out, const A&... args) {
    return replay_into(
        on_host, [](c10::DeviceIndex d, const at::Tensor& o, const auto&... a) { return out_as_is(d, o, a...); },
        out, args...);
  }

  // What a functional kernel reads and writes: its outputs and operands, or
  // for one that picks rows of `self`, its outputs twice and the rest.
  template <typename S, typename... R>
  static size_t functional_bytes(const NewOutputs<Impl, N>& op, const S& self, const R&... rest) {
    if constexpr (picks_rows<Impl>) {
      return 2 * op.nbytes() + tensor_bytes(rest...);
    } else {
      return op.nbytes() + tensor_bytes(self, rest...);
    }
  }

  // meta() allocates the outputs on emu: the kernel only fills them, so it is
  // queued. It runs on the emu tensors as they are or, when CPU's kernel
  // would take another path for them, on host aliases of them all.
  template <typename S, typename... R>
  static auto functional_on(c10::DeviceIndex device, const S& self, const R&... rest) {
    NewOutputs<Impl, N> op;
    op.meta(SchemaArg<Self>::to_meta(self), SchemaArg<Rest>::to_meta(rest)...);
    if (runs_as_is(op) && !needs_host_tensors<Impl>(self)) {
      queue_on(
          device, [&] { impl_into(op, self, rest...); },
          [&] { return replay_functional(outputs_of(op, std::make_index_sequence<N>()), self, rest...); },
          kernel_name<Impl>(), functional_bytes(op, self, rest...));
    } else {
      auto kernel = [&] { known_on_host(outputs_of(op, std::make_index_sequence<N>()), self, rest...); };
      auto make_owning = [&] { return replay_on_host(outputs_of(op, std::make_index_sequence<N>()), self, rest...); };
      if (promotes_integers_to_float(op)) {
        run_on(device, kernel, make_owning, kernel_name<Impl>());
      } else {
        queue_on(device, kernel, make_owning, kernel_name<Impl>(), functional_bytes(op, self, rest...));
      }
    }
    return take_outputs(op, std::make_index_sequence<N>());
  }

  // Replays (graphs): the same kernels on kept arguments, into the outputs
  // made at capture (as is) or into the blocks they got then (on host).
  template <size_t... I>
  static std::array<at::Tensor, N> outputs_of(NewOutputs<Impl, N>& op, std::index_sequence<I...>) {
    return {keep(*op.outputs[I])...};
  }

  template <typename S, typename... R>
  static std::function<void()> replay_functional(const std::array<at::Tensor, N>& outputs, const S& self,
                                                 const R&... rest) {
    return [outputs, kept = std::make_tuple(keep(self), keep(rest)...)]() mutable {
      std::apply([&](auto&... a) { call_known(outputs, std::make_index_sequence<N>(), borrow(a)...); }, kept);
    };
  }

  template <size_t... I, typename S, typename... R>
  static void call_known(const std::array<at::Tensor, N>& outputs, std::index_sequence<I...>, const S& self,
                         const R&... rest) {
    KnownOutputs<Impl, N> op(outputs);
    op.meta(SchemaArg<Self>::to_meta(self), SchemaArg<Rest>::to_meta(rest)...);
    op.impl(SchemaArg<Self>::to_meta(self), SchemaArg<Rest>::to_meta(rest)..., op.outputs[I]...);
  }

  // The kernel on host aliases of the outputs and of every emu argument.
  template <typename S, typename... R>
  static void known_on_host(const std::array<at::Tensor, N>& outputs, const S& self, const R&... rest) {
    HostAliases aliases;
    std::array<at::Tensor, N> host_outputs;
    for (size_t i = 0; i < N; ++i) {
      host_outputs[i] = aliases.alias(outputs[i]);
    }
    call_known(host_outputs, std::make_index_sequence<N>(), host_arg(aliases, self), host_arg(aliases, rest)...);
  }

  template <typename S, typename... R>
  static std::function<void()> replay_on_host(const std::array<at::Tensor, N>& outputs, const S& self,
                                              const R&... rest) {
    return [outputs, kept = std::make_tuple(keep(self), keep(rest)...)]() mutable {
      std::apply([&](auto&... a) { known_on_host(outputs, borrow(a)...); }, kept);
    };
  }

  template <typename... R>
  static std::function<void()> replay_inplace(bool on_host, const at::Tensor& self, const R&... rest) {
    return replay_into(
        on_host, [](c10::DeviceIndex d, const at::Tensor& t, const auto&... r) { return inplace_as_is(d, t, r...); },
        self, rest...);
  }

  // The replay of a kernel that writes into `target` (self in place, out for
  // out=): as_is(-1, target, args...) again on kept arguments, on host aliases
  // of them all when the kernel ran on host aliases.
  template <typename AsIs, typename... A>
  static std::function<void()> replay_into(bool on_host, AsIs as_is, const at::Tensor& target, const A&... args) {
    return [on_host, as_is, kept = std::make_tuple(keep(target), keep(args)...)]() mutable {
      std::apply(
          [&](at::Tensor& t, auto&... a) {
            if (on_host) {
              HostAliases aliases;
              as_is(-1, aliases.alias(t), host_arg(aliases, borrow(a))...);
            } else {
              as_is(-1, t, borrow(a)...);
            }
          },
          kept);
    };
  }

  template <typename Op, typename S, typename... R>
  static void impl_into(Op& op, const S& self, const R&... rest) {
    impl_into(op, std::make_index_sequence<N>(), SchemaArg<Self>::to_meta(self), SchemaArg<Rest>::to_meta(rest)...);
  }

  template <typename Op, size_t... I, typename... Args>
  static void impl_into(Op& op, std::index_sequence<I...>, const Args&... args) {
    op.impl(args..., *op.outputs[I]...);
  }

  // DTYPE_CHECK above: the functional form's meta() and impl() on stand-ins.
  template <typename S, typename... R>
  static void check_dtypes_once(const S& self, const R&... rest) {
    static CheckedDtypes checked;
    const uint64_t key = dtypes_key_of({dtype_part(self), dtype_part(rest)...});
    if (C10_LIKELY(checked.contains(key))) {
      return;
    }
    run_dtype_check([&] {
      const int64_t size = stand_in_errors_are_real<Impl> ? 1 : 0;
      const auto self_host = stand_in(self, size);
      const auto rest_host = std::make_tuple(stand_in(rest, size)...);
      std::apply(
          [&](const auto&... r) {
            NewOutputs<Impl, N, /*kOnHost=*/true> op;
            op.meta(SchemaArg<Self>::to_meta(self_host), SchemaArg<Rest>::to_meta(r)...);
            impl_into(op, self_host, r...);
          },
          rest_host);
    }, stand_in_errors_are_real<Impl>);
    checked.add(key);
  }

  template <size_t... I>
  static auto take_outputs(NewOutputs<Impl, N>& op, std::index_sequence<I...>) {
    if constexpr (N == 1) {
      return std::move(op.outputs[0]).take();
    } else {
      return std::make_tuple(std::move(op.outputs[I]).take()...);
    }
  }
};
// LITERALINCLUDE END: STRUCTURED

} // namespace kernel
} // namespace torch_emu
