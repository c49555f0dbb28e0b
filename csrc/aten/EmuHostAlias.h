// CPU tensors that alias emu device memory, so that PyTorch's CPU kernels can
// run directly on the device buffers (no copy in, no copy out).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

namespace torch_emu {

// One set of aliases per kernel launch. Emu tensors that share a storage get
// aliases that share one CPU storage, so CPU's overlap and identity checks
// (in-place ops, x[1:].copy_(x[:-1]), is_set_to) see what they would on CPU.
// Sparse tensors (COO, CSR, CSC, BSR, BSC) have no storage: their alias is a
// CPU sparse tensor whose indices and values alias the emu ones.
class HostAliases {
 public:
  // A CPU tensor viewing the same memory, sizes, strides and bits as `emu`.
  at::Tensor alias(const at::Tensor& emu);
  // The same for an optional argument (bias...): nullopt stays nullopt.
  std::optional<at::Tensor> alias(const std::optional<at::Tensor>& emu);

  // After the kernel: a CPU tensor the kernel returned, as an emu tensor of
  // `device`. An input alias maps back to its emu tensor, a view of an input
  // to a view of the emu storage, a tensor allocated inside the kernel (which
  // is emu memory, see EmuLaunch.cpp) is adopted without a copy.
  at::Tensor to_emu(const at::Tensor& cpu, c10::DeviceIndex device);

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
