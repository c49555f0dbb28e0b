// The minimal operator set: the ops a PrivateUse1 backend implements itself
// because everything else (the fallback, PyTorch's composite ops) is built on
// them: allocation, copies, resize and set_, and the six view ops that have no
// composite kernel (the fallback cannot run a view: it works on copies).
// Guide: torch-emu docs/guide/operators.md
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/strides.h>
#include <torch/library.h>

#include "core/check.h"

namespace torch_tpldev {
namespace {

constexpr auto kKeys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);

c10::Allocator* allocator() {
  return c10::GetAllocator(c10::DeviceType::PrivateUse1);
}

// Allocation happens on the current device: a guard makes it the requested
// one when the device has an index ("tpldev:1"), and leaves it for "tpldev".
std::optional<at::Device> indexed(std::optional<at::Device> device) {
  return device.has_value() && device->has_index() ? device : std::nullopt;
}

// LITERALINCLUDE START: OPS_EMPTY
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> /*layout*/, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!pin_memory.value_or(false), "only CPU tensors can be pinned");
  const c10::OptionalDeviceGuard guard(indexed(device));
  return at::detail::empty_generic(size, allocator(), kKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> /*layout*/, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false), "only CPU tensors can be pinned");
  const c10::OptionalDeviceGuard guard(indexed(device));
  return at::detail::empty_strided_generic(size, stride, allocator(), kKeys, c10::dtype_or_default(dtype));
}
// LITERALINCLUDE END: OPS_EMPTY

// LITERALINCLUDE START: OPS_COPY
// A CPU tensor over the same bytes. This driver's memory is host memory, so
// PyTorch's CPU copy kernel can do strided and dtype-converting copies; on
// real hardware this is where a device copy kernel (or a staging buffer) goes.
at::Tensor host_alias(const at::Tensor& t) {
  if (t.device().is_cpu()) {
    return t;
  }
  at::Tensor alias = at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
  alias._set_conj(t.is_conj()); // lazy conjugation and negation travel with the alias
  alias._set_neg(t.is_neg());
  return alias;
}

// copy_ lands here whenever one side is a tpldev tensor (host to device, device
// to host, device to device); `self` is the source.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  if (dst.numel() == 0) {
    return dst;
  }
  auto dense = [](const at::Tensor& t) { return t.is_contiguous() && !t.is_conj() && !t.is_neg(); };
  const bool plain = self.dtype() == dst.dtype() && self.sizes() == dst.sizes() && dense(self) && dense(dst);
  if (plain) { // the driver's own copy
    TPLDEV_CHECK(tpldevMemcpy(dst.data_ptr(), self.data_ptr(), dst.nbytes()));
  } else {
    host_alias(dst).copy_(host_alias(self));
  }
  return dst;
}
// LITERALINCLUDE END: OPS_COPY

// LITERALINCLUDE START: OPS_RESIZE
// Grows a storage on its own device, keeping its bytes.
void grow_storage(c10::StorageImpl* storage, size_t nbytes) {
  if (nbytes <= storage->nbytes()) {
    return;
  }
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const c10::DeviceGuard guard(storage->device());
  at::DataPtr fresh = allocator()->allocate(nbytes);
  if (storage->nbytes() > 0) {
    TPLDEV_CHECK(tpldevMemcpy(fresh.get(), storage->data(), storage->nbytes()));
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  at::detail::check_size_nonnegative(size);
  if (self.sizes() != size) { // same sizes: keep the strides (the fallback writes back into views)
    self.unsafeGetTensorImpl()->set_sizes_contiguous(size);
    grow_storage(self.storage().unsafeGetStorageImpl(),
                 at::detail::computeStorageNbytesContiguous(size, self.dtype().itemsize(), self.storage_offset()));
  }
  if (memory_format.has_value() && *memory_format != at::MemoryFormat::Preserve) {
    self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}
// LITERALINCLUDE END: OPS_RESIZE

// LITERALINCLUDE START: OPS_SET
at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  TORCH_CHECK(stride.data() == nullptr || stride.size() == size.size(), "set_: ", size.size(), " sizes but ",
              stride.size(), " strides");
  TORCH_CHECK(offset >= 0, "set_: invalid storage offset ", offset);
  TORCH_CHECK(source.device() == self.device(), "set_: the storage is on ", source.device(), ", the tensor on ",
              self.device());
  if (!self.storage().is_alias_of(source)) {
    self.unsafeGetTensorImpl()->set_storage_keep_dtype(std::move(source));
  }
  const c10::DimVector strides = stride.data() != nullptr ? c10::DimVector(stride) : c10::contiguous_strides(size);
  grow_storage(self.storage().unsafeGetStorageImpl(),
               at::detail::computeStorageNbytes(size, strides, self.dtype().itemsize(), offset));
  self.unsafeGetTensorImpl()->set_sizes_and_strides(size, strides, offset);
  return self;
}

// set_() without a source: an empty tensor on a new, empty storage of the same device.
at::Tensor& set_empty(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, allocator(), /*resizable=*/true);
  return set_storage(self, std::move(storage), 0, {0}, {});
}
// LITERALINCLUDE END: OPS_SET

} // namespace

// LITERALINCLUDE START: OPS_REGISTER
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Storage", TORCH_FN(at::native::set_));
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
  m.impl("set_", TORCH_FN(set_empty));
}

// A conjugated or negated view reaches copy_from as it is (host_alias carries
// the bits to CPU's copy). Without these, the Conjugate and Negative fallbacks
// would first materialise it with clone(), whose copy_ comes back here: an
// endless recursion.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
// LITERALINCLUDE END: OPS_REGISTER

} // namespace torch_tpldev
