// Quantized tensors on emu: the QuantizedPrivateUse1 dispatch key.
//
// A quantized emu tensor is a QTensorImpl whose storage is emu device memory
// and whose quantizer holds its parameters (per-channel scales and zero points
// as emu tensors on the same device, as CUDA keeps them). Registered here:
//   - the ops that make and describe such tensors without touching their
//     memory (empty, views, set_, the q_* accessors): the device-generic
//     functions PyTorch registers for QuantizedCPU;
//   - copies in, out and between devices (_copy_from);
//   - the global fallback for everything else (dequantize, int_repr, the
//     quantized:: kernels...): QuantizedCPU's kernel on host aliases, inside
//     one launch on the current stream (EmuFallback.cpp).
// Quantized ops whose inputs are float (quantize_per_tensor, linear_dynamic)
// dispatch to PrivateUse1 and take the same fallback with the CPU key; their
// quantized results come back as emu QTensorImpls (EmuHostAlias.cpp).
#include <ATen/ATen.h>
#include <ATen/ops/_empty_affine_quantized_native.h>
#include <ATen/ops/_empty_per_channel_affine_quantized_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_quantized_native.h>
#include <ATen/ops/q_per_channel_axis_native.h>
#include <ATen/ops/q_per_channel_scales_native.h>
#include <ATen/ops/q_per_channel_zero_points_native.h>
#include <ATen/ops/q_scale_native.h>
#include <ATen/ops/q_zero_point_native.h>
#include <ATen/ops/qscheme_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/squeeze_native.h>
#include <ATen/ops/unsqueeze_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/quantized/QTensorImpl.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/EmuFallback.h"
#include "aten/EmuHostAlias.h"
#include "aten/kernels/EmuOps.h"
#include "core/EmuLaunch.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

bool is_emu(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1;
}

at::Device emu_device(std::optional<at::Device> device) {
  return at::Device(c10::DeviceType::PrivateUse1,
                    device.has_value() && device->has_index() ? device->index() : current_device());
}

// LITERALINCLUDE START: QUANTIZED_EMPTY
// new_qtensor, behind these, allocates with the PrivateUse1 allocator on the
// current device: the guard makes that the requested one.
at::Tensor empty_affine_quantized(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                  std::optional<at::Layout> layout, std::optional<at::Device> device,
                                  std::optional<bool> pin_memory, double scale, int64_t zero_point,
                                  std::optional<at::MemoryFormat> memory_format) {
  const at::Device target = emu_device(device);
  const c10::DeviceGuard guard(target);
  return at::native::empty_affine_quantized(size, dtype, layout, target, pin_memory, scale, zero_point,
                                            memory_format);
}

// The parameters move to the tensor's device: onto emu when a CPU tensor is
// copied or loaded onto emu, onto the host when an emu tensor is copied there
// (Tensor.cpu() asks for its empty CPU copy with the emu parameters).
at::Tensor empty_per_channel_affine_quantized(c10::IntArrayRef size, const at::Tensor& scales,
                                              const at::Tensor& zero_points, int64_t axis,
                                              std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                                              std::optional<at::Device> device, std::optional<bool> pin_memory,
                                              std::optional<at::MemoryFormat> memory_format) {
  at::Device target = device.value_or(scales.device());
  if (target.type() == c10::DeviceType::PrivateUse1) {
    target = emu_device(target);
  }
  const c10::DeviceGuard guard(target);
  return at::native::empty_per_channel_affine_quantized(size, scales.to(target), zero_points.to(target), axis,
                                                        dtype, layout, target, pin_memory, memory_format);
}
// LITERALINCLUDE END: QUANTIZED_EMPTY

// LITERALINCLUDE START: QUANTIZED_COPY
// The stored integers of a quantized tensor as a plain integer tensor over the
// same memory (int8 for qint8, uint8 for quint8, int32 for qint32). Sub-byte
// types (quint4x2, quint2x4) pack several values in a byte: their bytes.
at::Tensor stored_integers(const at::Tensor& q) {
  const auto bytes = c10::scalarTypeToTypeMeta(c10::toUnderlying(q.scalar_type()));
  at::Tensor ints = tensor_over(q.storage(), q.device().type(), bytes, q);
  if (q.scalar_type() == at::kQUInt4x2 || q.scalar_type() == at::kQUInt2x4) {
    TORCH_CHECK(q.is_contiguous() && q.storage_offset() == 0, "copying a ", q.scalar_type(),
                " tensor between devices needs it contiguous (CPU has no copy kernel for it)");
    const int64_t per_byte = q.scalar_type() == at::kQUInt4x2 ? 2 : 4;
    ints.unsafeGetTensorImpl()->set_sizes_contiguous({(q.numel() + per_byte - 1) / per_byte});
  }
  return ints;
}

// copy_ with a quantized emu tensor on either side. Quantized to quantized is
// a copy of the stored integers (memcpy on the streams, as for any tensor)
// and of the source's quantizer; float into quantized quantizes with the
// destination's parameters, as CPU's copy_ does, on the device.
at::Tensor quantized_copy_from(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(dst.is_quantized(),
              "Copying from quantized Tensor to non-quantized Tensor is not allowed, please use dequantize "
              "to get a float Tensor from a quantized Tensor");
  if (src.is_quantized()) {
    TORCH_CHECK(dst.qscheme() == src.qscheme(), "Quantized Copy only works with same qscheme");
    TORCH_CHECK(dst.scalar_type() == src.scalar_type(), "Copying from quantized Tensor of type ",
                src.scalar_type(), " to quantized Tensor of type ", dst.scalar_type(), " is not allowed");
    TORCH_CHECK(dst.sizes() == src.sizes(), "copy_ between quantized tensors needs equal shapes, got ",
                src.sizes(), " and ", dst.sizes());
    copy_from(stored_integers(src), stored_integers(dst), non_blocking);
    at::set_quantizer_(dst, map_quantizer_params(src, [&](const at::Tensor& p) { return p.to(dst.device()); }));
    return dst;
  }
  const at::Tensor src_here = src.to(dst.device());
  if (!is_emu(dst)) {
    return dst.copy_(src_here);
  }
  HostAliases aliases;
  const at::Tensor host_dst = aliases.alias(dst), host_src = aliases.alias(src_here);
  launch_kernel(current_stream(dst.device().index()), [&] { host_dst.copy_(host_src); });
  return dst;
}

at::Tensor quantized_copy_from_and_resize(const at::Tensor& src, const at::Tensor& dst) {
  dst.resize_(src.sizes());
  return quantized_copy_from(src, dst, /*non_blocking=*/false);
}
// LITERALINCLUDE END: QUANTIZED_COPY

} // namespace

// LITERALINCLUDE START: QUANTIZED_REGISTER
TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&emu_fallback>());
}

TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  m.impl("_empty_affine_quantized", TORCH_FN(empty_affine_quantized));
  m.impl("_empty_per_channel_affine_quantized", TORCH_FN(empty_per_channel_affine_quantized));
  m.impl("empty_quantized", TORCH_FN(at::native::empty_quantized));
  m.impl("empty_like", TORCH_FN(at::native::empty_like_quantized));
  m.impl("clone", TORCH_FN(at::native::quantized_clone));
  m.impl("_copy_from", TORCH_FN(quantized_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(quantized_copy_from_and_resize));
  // Metadata only: the same device-generic functions QuantizedCPU registers.
  m.impl("as_strided", TORCH_FN(at::native::as_strided_qtensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("squeeze", static_cast<at::Tensor (*)(const at::Tensor&)>(&at::native::squeeze_quantized));
  m.impl("squeeze.dim", static_cast<at::Tensor (*)(const at::Tensor&, int64_t)>(&at::native::squeeze_quantized));
  m.impl("squeeze.dims",
         static_cast<at::Tensor (*)(const at::Tensor&, at::IntArrayRef)>(&at::native::squeeze_quantized));
  m.impl("unsqueeze", TORCH_FN(at::native::unsqueeze_quantized));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(at::native::set_storage_quantized_));
  m.impl("q_scale", TORCH_FN(at::native::q_scale_quant));
  m.impl("q_zero_point", TORCH_FN(at::native::q_zero_point_quant));
  m.impl("q_per_channel_scales", TORCH_FN(at::native::q_per_channel_scales));
  m.impl("q_per_channel_zero_points", TORCH_FN(at::native::q_per_channel_zero_points));
  m.impl("q_per_channel_axis", TORCH_FN(at::native::q_per_channel_axis));
  m.impl("qscheme", TORCH_FN(at::native::qscheme_quant));
}
// LITERALINCLUDE END: QUANTIZED_REGISTER

} // namespace torch_emu
