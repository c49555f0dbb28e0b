// The device check of every emu operator (native kernels and the fallback):
// which emu device runs it, and a clear error when its tensors are on two.
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/IListRef.h>

#include <optional>

namespace torch_emu {

// LITERALINCLUDE START: DEVICE_CHECK
// Visit every tensor argument, then finish(): the emu device of the op, or the
// current device if it has no emu tensor. Tensors on two emu devices, or an
// emu tensor with a host tensor that is not a 0-dim scalar, are an error with
// CUDA's wording; `op` (if given) is named in it. (The indexing ops' host
// index tensors are not visited: EmuFallback.cpp.)
struct DeviceCheck {
  c10::DeviceIndex index = -1;   // the first emu tensor's device
  c10::DeviceIndex other = -1;   // another emu device, if any (an error)
  bool host_tensor = false;      // a host tensor that is not a 0-dim scalar

  void visit(const at::Tensor& t);
  void visit(const std::optional<at::Tensor>& t) {
    if (t.has_value()) visit(*t);
  }
  void visit(at::TensorList list) {
    for (const at::Tensor& t : list) visit(t);
  }
  void visit(const at::ITensorListRef& list) {
    for (const at::Tensor& t : list) visit(t);
  }
  void visit(const c10::List<std::optional<at::Tensor>>& list) {
    for (const std::optional<at::Tensor> t : list) visit(t);
  }
  template <typename T>
  void visit(const T&) {} // not a tensor

  c10::DeviceIndex finish(const char* op = nullptr) const;
};
// LITERALINCLUDE END: DEVICE_CHECK

} // namespace torch_emu
