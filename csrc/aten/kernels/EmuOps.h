// Operator-level helpers shared by the emu kernels and the fallback.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>

namespace torch_emu {

// Uninitialised emu tensors on `device` (the current emu device if it has no
// index): the allocations behind every emu tensor (EmuMinimalOps.cpp).
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format);
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory);

// copy_ between emu and emu (same device or peer), CPU and emu, emu and CPU.
at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool non_blocking);

} // namespace torch_emu
