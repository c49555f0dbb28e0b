#include "core/EmuSerialization.h"

#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <charconv>
#include <string>
#include <system_error>

namespace torch_emu {
namespace {

const EmuBackendMeta* emu_meta(const at::Tensor& tensor) {
  if (!tensor.defined()) {
    return nullptr;
  }
  return dynamic_cast<const EmuBackendMeta*>(tensor.unsafeGetTensorImpl()->get_backend_meta());
}

// LITERALINCLUDE START: META_HOOKS
// torch.save keeps a tensor's metadata as a dict of str -> bool next to its
// storage; the tag travels as one key, "emu_format_<tag>": True.
constexpr std::string_view kFormatKey = "emu_format_";

// Called by torch._utils.get_tensor_metadata (torch.save, JIT pickler) for
// every emu tensor: adds the tensor's backend metadata to `metadata`.
void get_backend_meta(const at::Tensor& tensor, std::unordered_map<std::string, bool>& metadata) {
  if (const int64_t format = format_tag(tensor); format != 0) {
    metadata[std::string(kFormatKey) + std::to_string(format)] = true;
  }
}

// Called by torch._utils.set_tensor_metadata (torch.load) for every tensor
// rebuilt on an emu device: restores the tag from `metadata`.
void set_backend_meta(const at::Tensor& tensor, std::unordered_map<std::string, bool>& metadata) {
  for (const auto& [key, value] : metadata) {
    if (!value || key.rfind(kFormatKey, 0) != 0) {
      continue;
    }
    const std::string_view digits = std::string_view(key).substr(kFormatKey.size());
    int64_t format = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), format);
    TORCH_CHECK(error == std::errc() && end == digits.data() + digits.size() && format > 0,
                "Malformed emu tensor metadata in checkpoint: '", key, "'");
    set_format_tag(tensor, format);
  }
}

// At library load. PyTorch allows these hooks for PrivateUse1 only, once.
const bool hooks_registered = [] {
  torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &get_backend_meta, &set_backend_meta);
  return true;
}();
// LITERALINCLUDE END: META_HOOKS

} // namespace

int64_t format_tag(const at::Tensor& tensor) {
  const EmuBackendMeta* meta = emu_meta(tensor);
  return meta != nullptr ? meta->format : 0;
}

// LITERALINCLUDE START: SET_FORMAT_TAG
void set_format_tag(const at::Tensor& tensor, int64_t format) {
  TORCH_CHECK(tensor.defined(), "set_format_tag: expected a tensor, got an undefined one");
  TORCH_CHECK(tensor.device().type() == c10::DeviceType::PrivateUse1,
              "set_format_tag: only emu tensors carry a format tag, got a tensor on ", tensor.device());
  TORCH_CHECK_VALUE(format >= 0, "set_format_tag: the format tag must be >= 0 (0 removes it), got ", format);
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  if (format == 0) {
    if (impl->get_backend_meta() != nullptr) {
      impl->set_backend_meta(nullptr);
    }
    return;
  }
  impl->set_backend_meta(c10::make_intrusive<EmuBackendMeta>(format));
}
// LITERALINCLUDE END: SET_FORMAT_TAG

void copy_backend_meta(const at::Tensor& src, const at::Tensor& dst) {
  c10::TensorImpl* to = dst.unsafeGetTensorImpl();
  c10::intrusive_ptr<c10::BackendMeta> meta = src.unsafeGetTensorImpl()->get_backend_meta_intrusive_ptr();
  if (meta) {
    to->set_backend_meta(meta->clone(meta));
  } else if (to->get_backend_meta() != nullptr) {
    to->set_backend_meta(nullptr);
  }
}

} // namespace torch_emu
