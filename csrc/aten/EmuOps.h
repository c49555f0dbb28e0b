// Operator-level helpers shared by the emu kernels, the fallback and the hooks.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/StorageImpl.h>

namespace torch_emu {

// Grows or shrinks an emu storage to `new_bytes`, keeping the common prefix
// (copied on the current stream of the storage's device).
void resize_storage_bytes(c10::StorageImpl* storage, size_t new_bytes);

// copy_ between emu and emu (same device or peer), CPU and emu, emu and CPU.
at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool non_blocking);

} // namespace torch_emu
