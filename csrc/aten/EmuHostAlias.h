// CPU tensors that alias emu device memory, so that PyTorch's CPU kernels can
// run directly on the device buffers (no copy in, no copy out).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/quantized/Quantizer.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/SmallVector.h>

#include <vector>

namespace torch_emu {

// A tensor over `storage` with the sizes, strides, offset and conj/neg bits of
// `like`, the dispatch keys of `device_type` and the element type `dtype`. A
// quantizer makes it a quantized tensor (QTensorImpl) of that device type.
at::Tensor tensor_over(c10::Storage storage, c10::DeviceType device_type, caffe2::TypeMeta dtype,
                       const at::Tensor& like, at::QuantizerPtr quantizer = {});

// The quantizer of a quantized tensor with its parameter tensors passed
// through `map`. Per-tensor parameters are plain numbers: the quantizer is
// shared. Per-channel scales and zero points are tensors on the quantized
// tensor's device, so a quantizer for another device needs them mapped there.
at::QuantizerPtr map_quantizer_params(const at::Tensor& qtensor,
                                      c10::function_ref<at::Tensor(const at::Tensor&)> map);

// One set of aliases per kernel launch. Emu tensors that share a storage get
// aliases that share one CPU storage, so CPU's overlap and identity checks
// (in-place ops, x[1:].copy_(x[:-1]), is_set_to) see what they would on CPU.
// Sparse tensors (COO, CSR, CSC, BSR, BSC) have no storage: their alias is a
// CPU sparse tensor whose indices and values alias the emu ones.
class HostAliases {
 public:
  // A CPU tensor viewing the same memory, sizes, strides and bits as `emu`
  // (a QuantizedCPU tensor for a quantized one, with aliased parameters).
  at::Tensor alias(const at::Tensor& emu);
  // The same for an optional argument (bias...): nullopt stays nullopt.
  std::optional<at::Tensor> alias(const std::optional<at::Tensor>& emu);

  // After the kernel: a CPU tensor the kernel returned, as an emu tensor of
  // `device`. An input alias maps back to its emu tensor, a view of an input
  // to a view of the emu storage, a tensor allocated inside the kernel (which
  // is emu memory, see EmuLaunch.cpp) is adopted without a copy.
  at::Tensor to_emu(const at::Tensor& cpu, c10::DeviceIndex device);

  // The emu storages aliased so far: what keeps the aliases' memory alive
  // after the launch (the replay closures of graphs hold them).
  std::vector<c10::Storage> emu_storages() const;

  // After the kernel: propagate resizes the kernel made to input aliases
  // (out= arguments) back to their emu tensors.
  void sync_inputs();

 private:
  // The sparse layouts (EmuSparseAlias.cpp).
  at::Tensor alias_sparse(const at::Tensor& emu);
  at::Tensor sparse_to_emu(const at::Tensor& cpu, c10::DeviceIndex device);
  void sync_sparse_inputs();

  c10::Storage& cpu_storage_for(const c10::Storage& emu);
  struct Pair {
    c10::Storage emu;
    c10::Storage cpu;
  };
  struct InputPair {
    at::Tensor emu;
    at::Tensor cpu;
  };
  c10::SmallVector<Pair, 4> storages_;
  c10::SmallVector<InputPair, 4> inputs_;
  c10::SmallVector<InputPair, 1> sparse_inputs_;
};

} // namespace torch_emu
