// Backend metadata of emu tensors: a private "format" tag carried by the
// TensorImpl (c10::BackendMeta), the way a vendor marks tensors whose device
// memory uses a private layout. It survives torch.save/torch.load (through the
// serialization hooks registered in EmuSerialization.cpp), clone and deepcopy.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>

namespace torch_emu {

// LITERALINCLUDE START: BACKEND_META
// The metadata object hung on an emu TensorImpl. It is immutable: changing a
// tag installs a new object, so copies may share or clone it freely.
struct EmuBackendMeta final : c10::BackendMeta {
  explicit EmuBackendMeta(int64_t format) : format(format) {}

  // Called by c10::ExtraMeta's copy, i.e. whenever PyTorch copies a tensor's
  // metadata to a new TensorImpl (detach, shallow copies, Parameter(...)).
  c10::intrusive_ptr<c10::BackendMeta> clone(const c10::intrusive_ptr<c10::BackendMeta>& ptr) const override {
    return c10::make_intrusive<EmuBackendMeta>(format);
  }

  const int64_t format; // > 0; tensors without a tag carry no EmuBackendMeta
};
// LITERALINCLUDE END: BACKEND_META

// The format tag of `tensor`: 0 when it has none (and for non-emu tensors).
int64_t format_tag(const at::Tensor& tensor);

// Tags an emu tensor with `format` (> 0); 0 removes the tag. Only this
// TensorImpl is tagged: views and other tensors sharing the storage are not.
void set_format_tag(const at::Tensor& tensor, int64_t format);

// Gives `dst` the backend metadata of `src` (none if `src` has none).
void copy_backend_meta(const at::Tensor& src, const at::Tensor& dst);

} // namespace torch_emu
