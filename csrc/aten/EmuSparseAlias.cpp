// Host aliases of sparse tensors. A sparse emu tensor is a SparseTensorImpl
// (COO) or SparseCsrTensorImpl (CSR, CSC, BSR, BSC) whose member tensors
// (indices, values) are dense emu tensors. Its alias for a CPU kernel is the
// same kind of impl on the CPU sparse key, with the members' dense aliases;
// what the kernel returns is re-wrapped the other way. No data is copied.
#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseCsrTensorUtils.h>
#include <ATen/native/SparseTensorUtils.h>
#include <c10/core/DeviceGuard.h>

#include "aten/EmuHostAlias.h"

namespace torch_emu {
namespace {

// LITERALINCLUDE START: SPARSE_ALIAS
// An empty sparse tensor of `like`'s layout and dtype on `device` (CPU or emu).
at::Tensor new_sparse_like(const at::Tensor& like, c10::Device device) {
  const auto backend = device.is_cpu() ? c10::BackendComponent::CPUBit : c10::BackendComponent::PrivateUse1Bit;
  const c10::DeviceGuard guard(device); // a COO impl takes the current device
  if (like.layout() == at::kSparse) {
    const auto key = c10::toRuntimePerBackendFunctionalityKey(c10::DispatchKey::Sparse, backend);
    return at::detail::make_tensor<at::SparseTensorImpl>(c10::DispatchKeySet(key), like.dtype());
  }
  const auto key = c10::toRuntimePerBackendFunctionalityKey(c10::DispatchKey::SparseCsr, backend);
  return at::detail::make_tensor<at::SparseCsrTensorImpl>(c10::DispatchKeySet(key), device, like.layout(),
                                                          like.dtype());
}

// The dense member tensors: COO {indices, values}; compressed layouts
// {compressed indices, plain indices, values}.
c10::SmallVector<at::Tensor, 3> sparse_members(const at::Tensor& t) {
  if (t.layout() == at::kSparse) {
    const at::SparseTensorImpl* impl = at::sparse::get_sparse_impl(t);
    return {impl->indices(), impl->values()};
  }
  const at::SparseCsrTensorImpl* impl = at::sparse_csr::get_sparse_csr_impl(t);
  return {impl->compressed_indices(), impl->plain_indices(), impl->values()};
}

// Gives `to` the geometry of `from` (sizes, sparse/dense dims, coalesced
// flag) and the member tensors `members`.
void set_sparse(const at::Tensor& from, const at::Tensor& to, c10::ArrayRef<at::Tensor> members) {
  if (from.layout() == at::kSparse) {
    const at::SparseTensorImpl* src = at::sparse::get_sparse_impl(from);
    at::SparseTensorImpl* dst = at::sparse::get_sparse_impl(to);
    dst->raw_resize_(src->sparse_dim(), src->dense_dim(), from.sizes());
    dst->set_indices_and_values_unsafe(members[0], members[1]);
    dst->set_coalesced(src->coalesced());
  } else {
    at::sparse_csr::get_sparse_csr_impl(to)->set_member_tensors(members[0], members[1], members[2], from.sizes());
  }
}

template <typename Fn>
c10::SmallVector<at::Tensor, 3> map_members(const at::Tensor& sparse, Fn&& fn) {
  c10::SmallVector<at::Tensor, 3> members = sparse_members(sparse);
  for (at::Tensor& m : members) {
    m = fn(m);
  }
  return members;
}

} // namespace

at::Tensor HostAliases::alias_sparse(const at::Tensor& emu) {
  // One alias per emu tensor: CPU's sparse kernels test identity
  // (is_same_tensor) where dense ones test storage overlap.
  for (const InputPair& in : sparse_inputs_) {
    if (in.emu.unsafeGetTensorImpl() == emu.unsafeGetTensorImpl()) {
      return in.cpu;
    }
  }
  at::Tensor cpu = new_sparse_like(emu, c10::Device(c10::DeviceType::CPU));
  set_sparse(emu, cpu, map_members(emu, [&](const at::Tensor& t) { return alias(t); }));
  sparse_inputs_.push_back({emu, cpu});
  return cpu;
}

at::Tensor HostAliases::sparse_to_emu(const at::Tensor& cpu, c10::DeviceIndex device) {
  for (const InputPair& in : sparse_inputs_) {
    if (in.cpu.unsafeGetTensorImpl() == cpu.unsafeGetTensorImpl()) {
      return in.emu; // in-place and out= ops return their argument itself
    }
  }
  at::Tensor emu = new_sparse_like(cpu, c10::Device(c10::DeviceType::PrivateUse1, device));
  set_sparse(cpu, emu, map_members(cpu, [&](const at::Tensor& t) { return to_emu(t, device); }));
  return emu;
}
// LITERALINCLUDE END: SPARSE_ALIAS

// LITERALINCLUDE START: SPARSE_SYNC
// In-place and out= kernels (add_, zero_, coalesce into out, resize_as_...)
// give a sparse argument new members or a new shape: the emu tensor takes
// them over (as emu tensors: the kernel allocated them in device memory).
void HostAliases::sync_sparse_inputs() {
  for (const InputPair& in : sparse_inputs_) {
    const c10::DeviceIndex device = in.emu.device().index();
    const auto members = map_members(in.cpu, [&](const at::Tensor& t) { return to_emu(t, device); });
    const auto current = sparse_members(in.emu);
    bool same = in.cpu.sizes() == in.emu.sizes() &&
        (in.cpu.layout() != at::kSparse ||
         at::sparse::get_sparse_impl(in.cpu)->coalesced() == at::sparse::get_sparse_impl(in.emu)->coalesced());
    for (size_t i = 0; same && i < members.size(); ++i) {
      same = members[i].unsafeGetTensorImpl() == current[i].unsafeGetTensorImpl();
    }
    if (!same) {
      set_sparse(in.cpu, in.emu, members);
    }
  }
}
// LITERALINCLUDE END: SPARSE_SYNC

} // namespace torch_emu
