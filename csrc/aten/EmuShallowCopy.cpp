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
#include <c10/core/DispatchKeySet.h>
#include <torch/library.h>

namespace torch_emu {
namespace {

// LITERALINCLUDE START: SHALLOW_COPY
// Emu and CPU tensors of the same layout are the same TensorImpl class (dense:
// TensorImpl, sparse COO: SparseTensorImpl), so one can take the other's
// storage, sizes and dispatch keys, exactly as a CPU tensor can a CUDA one's.
bool same_layout_on_cpu_or_emu(c10::DispatchKeySet a, c10::DispatchKeySet b, c10::DispatchKey layout_key) {
  const auto on_cpu_or_emu = [layout_key](c10::DispatchKeySet ks) {
    constexpr auto backends =
        c10::DispatchKeySet({c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit});
    return ks.has_any(c10::DispatchKeySet(layout_key)) && ks.has_any(backends);
  };
  return on_cpu_or_emu(a) && on_cpu_or_emu(b);
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const c10::DispatchKeySet a = self.key_set(), b = from.key_set();
  return same_layout_on_cpu_or_emu(a, b, c10::DispatchKey::Dense) ||
         same_layout_on_cpu_or_emu(a, b, c10::DispatchKey::Sparse) ||
         self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(b);
}

// The op dispatches on both arguments' keys, so this kernel answers for
// CPU <-> emu pairs in either order as well as emu <-> emu.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}
// LITERALINCLUDE END: SHALLOW_COPY

} // namespace
} // namespace torch_emu
