// aten::_has_compatible_shallow_copy_type for emu.
//
// Module._apply (module.to("emu"), .emu(), .to(dtype)) and `tensor.data = t`
// ask this op whether a tensor's TensorImpl can take another tensor's
// metadata in place. Its default answer (TensorImpl::
// has_compatible_shallow_copy_type) lists CPU, CUDA and the other in-tree
// backends, but not PrivateUse1: without this kernel, module.to("emu") builds
// new Parameter objects, which unties tied weights (an LM head sharing its
// embedding) and leaves an optimizer built before the move updating tensors
// the model no longer uses. CUDA keeps both; so does emu.
#include <ATen/SparseCsrTensorUtils.h>
#include <c10/core/DispatchKeySet.h>
#include <torch/library.h>

namespace torch_emu {
namespace {

// LITERALINCLUDE START: SHALLOW_COPY
// Dense emu and CPU tensors are the same TensorImpl class, so one can take the
// other's storage, sizes and dispatch keys, exactly as a CPU tensor can a
// CUDA one's. Sparse layouts keep PyTorch's own answer, with one exception:
// - COO: SparseTensorImpl's shallow copy asserts a fixed backend list without
//   PrivateUse1, so CPU <-> emu stays "no" (a new Parameter); emu:0 <-> emu:1
//   is "yes".
// - Compressed layouts (CSR, CSC, BSR, BSC): PyTorch says "yes" for any two,
//   but SparseCsrTensorImpl's shallow copy keeps its old member tensors (on
//   CPU too: param.data = csr leaves the old values), so a CSR parameter
//   moved to emu would claim emu and hold host memory. Across devices: "no".
bool dense_on_cpu_or_emu(c10::DispatchKeySet keys) {
  constexpr auto backends =
      c10::DispatchKeySet({c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit});
  return keys.has(c10::DispatchKey::Dense) && keys.has_any(backends);
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (dense_on_cpu_or_emu(self.key_set()) && dense_on_cpu_or_emu(from.key_set())) {
    return true;
  }
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) &&
      (!at::sparse_csr::is_sparse_compressed(self) || self.device() == from.device());
}

// The op dispatches on both arguments' keys, so this kernel answers for
// CPU <-> emu pairs in either order as well as emu <-> emu. Registered for the
// dense key: that also takes the op's generic kernel out of the
// AutogradPrivateUse1 slot, which every emu call passes first.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}
// LITERALINCLUDE END: SHALLOW_COPY

} // namespace
} // namespace torch_emu
