// The minimal operator set: the ops every PrivateUse1 backend must implement
// natively, because the fallback itself (and PyTorch's composite ops) build on
// them. Everything else works through the fallback (EmuFallback.cpp).
#include <ATen/Dispatch_v2.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <optional>

#include "aten/kernels/EmuOps.h"
#include "core/EmuDeviceAllocator.h"
#include "core/EmuKernelAllocator.h"
#include "core/EmuException.h"
#include "core/EmuStorageImpl.h"
#include "core/EmuStream.h"
#include "core/EmuSyncDebug.h"

namespace torch_emu {
namespace {

constexpr auto kEmuKeys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);

// LITERALINCLUDE START: OP_DETERMINISTIC_FILL
// With torch.use_deterministic_algorithms(True) and
// torch.utils.deterministic.fill_uninitialized_memory (its default), CPU and
// CUDA fill new memory (empty*, what resize_ adds) with NaN, or an integer
// type's maximum, so that reading it before writing gives the same result
// every run. The fill is an ordinary emu kernel on the current stream.
bool fill_uninitialized_memory() {
  const at::Context& context = at::globalContext();
  return C10_UNLIKELY(context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory());
}

at::Tensor filled_if_deterministic(at::Tensor out) {
  if (fill_uninitialized_memory()) {
    at::native::fill_empty_deterministic_(out);
  }
  return out;
}
// LITERALINCLUDE END: OP_DETERMINISTIC_FILL

} // namespace

// LITERALINCLUDE START: OP_EMPTY
namespace {

// A tensor of `dtype` on a new emu storage of `nbytes`, allocated on the
// current stream of the device `device` names (the current device if it has
// no index). Its sizes are still those of an empty tensor ([0]).
at::Tensor on_new_storage(size_t nbytes, at::ScalarType dtype, std::optional<at::Device> device) {
  // A guard only for another device: asking the runtime for the current
  // device and setting it back costs more than the rest of a small op's
  // allocation.
  c10::OptionalDeviceGuard guard;
  if (device.has_value() && device->has_index() && device->index() != current_device()) {
    guard.reset_device(*device);
  }
  if (dtype == at::kComplexHalf) {
    TORCH_WARN_ONCE("ComplexHalf support is experimental and many operators don't support it yet.");
  }
  return at::detail::make_tensor<c10::TensorImpl>(emu_storage(allocate_device(nbytes), nbytes),
                                                  kEmuKeys, c10::scalarTypeToTypeMeta(dtype));
}

} // namespace

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!pin_memory.has_value() || !*pin_memory, "Only dense CPU tensors can be pinned");
  at::detail::check_size_nonnegative(size);
  const at::ScalarType scalar_type = c10::dtype_or_default(dtype);
  at::Tensor out = on_new_storage(
      at::detail::computeStorageNbytesContiguous(size, c10::elementSize(scalar_type)), scalar_type, device);
  out.unsafeGetTensorImpl()->set_sizes_contiguous(size);
  if (memory_format.has_value() && *memory_format != at::MemoryFormat::Contiguous) {
    out.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  return filled_if_deterministic(std::move(out));
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.has_value() || !*pin_memory, "Only dense CPU tensors can be pinned");
  at::detail::check_size_nonnegative(size);
  const at::ScalarType scalar_type = c10::dtype_or_default(dtype);
  at::Tensor out = on_new_storage(
      at::detail::computeStorageNbytes(size, stride, c10::elementSize(scalar_type)), scalar_type, device);
  out.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride);
  return filled_if_deterministic(std::move(out));
}
// LITERALINCLUDE END: OP_EMPTY

namespace {

// LITERALINCLUDE START: OP_RESIZE
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!memory_format.has_value() || *memory_format != at::MemoryFormat::Preserve,
              "Unsupported memory format", *memory_format);
  auto* impl = self.unsafeGetTensorImpl();
  const size_t old_nbytes = self.storage().nbytes();
  if (self.sizes() != size) {
    impl->set_sizes_contiguous(size);
    const size_t needed = at::detail::computeStorageNbytesContiguous(
        size, self.dtype().itemsize(), self.storage_offset());
    if (needed > old_nbytes) {
      resize_storage_bytes(self.storage().unsafeGetStorageImpl(), needed);
    }
  }
  if (memory_format.has_value()) {
    impl->empty_tensor_restride(*memory_format);
  }
  if (fill_uninitialized_memory()) {
    at::native::fill_resize_deterministic_(self, static_cast<int64_t>(old_nbytes));
  }
  return self;
}
// LITERALINCLUDE END: OP_RESIZE

// LITERALINCLUDE START: OP_SET
at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage source, int64_t storage_offset,
                                      c10::IntArrayRef size, c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, std::move(source), storage_offset, size, stride);
  const c10::DimVector strides =
      stride.data() != nullptr ? c10::DimVector(stride) : c10::contiguous_strides(size);
  const size_t needed = at::detail::computeStorageNbytes(size, strides, self.dtype().itemsize(),
                                                         storage_offset);
  if (needed > self.storage().nbytes()) {
    resize_storage_bytes(self.storage().unsafeGetStorageImpl(), needed);
  }
  self.unsafeGetTensorImpl()->set_sizes_and_strides(size, strides, storage_offset);
  return self;
}

// set_() with no source: an empty tensor on a fresh, empty storage of its own
// device (set_ runs without the dispatcher's device guard).
at::Tensor& set_empty(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage = emu_storage(device_allocator()->allocate(0), 0);
  return set_source_storage_offset(self, std::move(storage), 0, {0}, {});
}
// LITERALINCLUDE END: OP_SET

// LITERALINCLUDE START: OP_SCALAR
// .item(): the first element, copied to the host as CUDA copies it: on the
// tensor's current stream into pageable memory, which waits for the stream's
// work (the copy is traced, modelled and fault-checked like any other). The
// bytes land in a buffer on this thread's stack and become the Scalar here:
// no host tensor, no second dispatch, which is most of a small op's time. As
// on CPU, .item() itself refuses more than one element; this reads the first
// one of any non-empty tensor.
at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "_local_scalar_dense: Empty tensor not supported");
  warn_or_error_on_sync("Tensor.item() (aten::_local_scalar_dense)");
  alignas(16) std::array<char, 16> bytes{}; // the widest dtype: complex double
  TORCH_INTERNAL_ASSERT(self.element_size() <= static_cast<int64_t>(bytes.size()));
  EMU_CHECK(emuMemcpyAsync(bytes.data(), self.const_data_ptr(), self.element_size(), emuMemcpyDeviceToHost,
                           native_stream(current_stream(self.device().index()))));
  std::optional<at::Scalar> value;
  AT_DISPATCH_V2(self.scalar_type(), "_local_scalar_dense_emu",
                 AT_WRAP([&] { value.emplace(*reinterpret_cast<const scalar_t*>(bytes.data())); }),
                 AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kComplexHalf, at::kHalf, at::kBool, at::kBFloat16,
                 AT_EXPAND(AT_FLOAT8_TYPES), AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  return *value;
}
// LITERALINCLUDE END: OP_SCALAR

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, /*non_blocking=*/false);
}

} // namespace

// LITERALINCLUDE START: MINIMAL_OPS_REGISTER
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
  m.impl("set_.source_Storage", TORCH_FN(at::native::set_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_source_storage_offset));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("view", TORCH_FN(at::native::view));
}
// LITERALINCLUDE END: MINIMAL_OPS_REGISTER

} // namespace torch_emu
