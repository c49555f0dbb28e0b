// Scenario 2: DispatchStub registration.
//
// Many ATen kernels are written once for every device: they build a
// TensorIterator and call a *stub*, e.g. fill_stub(iter.device_type(), iter,
// value), which jumps to the kernel registered for that device type.
// REGISTER_PRIVATEUSE1_DISPATCH fills the PrivateUse1 slot of a stub.
//
// A stub is only reached with a PrivateUse1 iterator when the device-generic
// ATen function itself runs on emu tensors. The global fallback never does
// that: it runs CPU kernels on CPU aliases, whose iterators say CPU. Emu
// registers the generic functions at::native::fill_ and at::native::abs_out
// as its kernels of aten::fill_.Scalar and aten::abs.out
// (csrc/aten/kernels/EmuElementwiseKernels.cpp): they build an emu
// TensorIterator and call the stubs, whose PrivateUse1 slots emu fills with
// CPU's kernels. This file fills those slots with kernels of its own instead
// (a later registration of a slot replaces the earlier one).
#include <ATen/Dispatch_v2.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/Fill.h>
#include <ATen/native/UnaryOps.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <iterator>

#include "aten/kernels/EmuKernel.h"
#include "core/EmuLaunch.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

c10::Stream stream_of(const at::TensorIteratorBase& iter) {
  return current_stream(iter.device().index());
}

// The dtypes the hand-written loops below cover; any other dtype runs the
// stub's CPU kernel on the same iterator (emu memory is host memory; see
// csrc/aten/kernels/EmuCpuStubs.cpp for why an extension can call it).
constexpr at::ScalarType kFillTypes[] = {
    at::kByte, at::kChar, at::kShort, at::kInt, at::kLong, at::kFloat, at::kDouble, at::kComplexFloat,
    at::kComplexDouble, at::kBool, at::kHalf, at::kBFloat16};
constexpr at::ScalarType kAbsTypes[] = {
    at::kByte, at::kChar, at::kShort, at::kInt, at::kLong, at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};

template <size_t N>
bool handled(at::ScalarType dtype, const at::ScalarType (&types)[N]) {
  return std::find(std::begin(types), std::end(types), dtype) != std::end(types);
}

// LITERALINCLUDE START: STUB_KERNELS
// fill_stub: one output operand, every element set to `value`.
void fill_on_device(at::TensorIterator& iter, const c10::Scalar& value) {
  {
    if (!handled(iter.dtype(), kFillTypes)) {
      at::native::fill_stub(c10::DeviceType::CPU, iter, value); // float8 and other rare types
      return;
    }
    AT_DISPATCH_V2(iter.dtype(), "emu_fill", AT_WRAP([&] {
      const scalar_t v = value.to<scalar_t>();
      iter.for_each([v](char** data, const int64_t* strides, int64_t n) {
        char* out = data[0];
        for (int64_t i = 0; i < n; ++i, out += strides[0]) {
          *reinterpret_cast<scalar_t*>(out) = v;
        }
      });
    }), AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kBool, at::kHalf, at::kBFloat16);
  }
}

// The kernel is queued (the output exists); its closure, which also replays
// it in a graph, rebuilds the iterator at::native::fill_ built over the output.
void emu_fill_kernel(at::TensorIterator& iter, const c10::Scalar& value) {
  queue_kernel(
      stream_of(iter), [&] { fill_on_device(iter, value); },
      [&]() -> std::function<void()> {
        return [out = kernel::keep(iter.tensor(0)), value] {
          auto replay = at::TensorIteratorConfig()
                            .set_check_mem_overlap(false)
                            .check_all_same_dtype(false)
                            .add_output(out)
                            .resize_outputs(false)
                            .build();
          fill_on_device(replay, value);
        };
      },
      "fill_");
}

// abs_stub: operand 0 is the output, operand 1 the input.
void abs_on_device(at::TensorIteratorBase& iter) {
  {
    const at::ScalarType dtype = iter.input_dtype();
    if (iter.dtype(0) != dtype || !handled(dtype, kAbsTypes)) {
      at::native::abs_stub(c10::DeviceType::CPU, iter); // complex, bool, unsigned
      return;
    }
    AT_DISPATCH_V2(dtype, "emu_abs", AT_WRAP([&] {
      iter.for_each([](char** data, const int64_t* strides, int64_t n) {
        char* out = data[0];
        const char* in = data[1];
        for (int64_t i = 0; i < n; ++i, out += strides[0], in += strides[1]) {
          const auto x = static_cast<at::opmath_type<scalar_t>>(*reinterpret_cast<const scalar_t*>(in));
          *reinterpret_cast<scalar_t*>(out) = static_cast<scalar_t>(std::abs(x));
        }
      });
    }), AT_EXPAND(AT_ALL_TYPES), at::kHalf, at::kBFloat16);
  }
}

void emu_abs_kernel(at::TensorIteratorBase& iter) {
  queue_kernel(
      stream_of(iter), [&] { abs_on_device(iter); },
      [&]() -> std::function<void()> {
        return [out = kernel::keep(iter.tensor(0)), in = kernel::keep(iter.tensor(1))]() mutable {
          auto replay = at::TensorIterator::unary_op(out, in);
          abs_on_device(replay);
        };
      },
      "abs");
}
// LITERALINCLUDE END: STUB_KERNELS

} // namespace

} // namespace torch_emu

// LITERALINCLUDE START: STUB_REGISTER
// The macro names the stub unqualified, so it is used in the stubs' namespace.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(fill_stub, &torch_emu::emu_fill_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(abs_stub, &torch_emu::emu_abs_kernel)
} // namespace at::native
// LITERALINCLUDE END: STUB_REGISTER
