#include "aten/EmuHostAlias.h"

#include <ATen/core/grad_mode.h>
#include <ATen/quantized/QTensorImpl.h>
#include <c10/core/CPUAllocator.h>

#include "core/EmuDeviceAllocator.h"
#include "core/EmuLaunch.h"
#include "core/EmuStorageImpl.h"

namespace torch_emu {
namespace {

void copy_view_bits(const at::Tensor& from, c10::TensorImpl* to) {
  to->set_sizes_and_strides(from.sizes(), from.strides(), from.storage_offset());
  to->_set_conj(from.is_conj());
  to->_set_neg(from.is_neg());
  if (from.unsafeGetTensorImpl()->is_wrapped_number()) {
    to->set_wrapped_number(true); // type promotion treats it as a Python scalar
  }
}

c10::DispatchKey key_of(c10::DeviceType device_type, bool quantized) {
  if (device_type == c10::DeviceType::CPU) {
    return quantized ? c10::DispatchKey::QuantizedCPU : c10::DispatchKey::CPU;
  }
  return quantized ? c10::DispatchKey::QuantizedPrivateUse1 : c10::DispatchKey::PrivateUse1;
}

bool is_emu(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

} // namespace

at::Tensor tensor_over(c10::Storage storage, c10::DeviceType device_type, caffe2::TypeMeta dtype,
                       const at::Tensor& like, at::QuantizerPtr quantizer) {
  const c10::DispatchKeySet keys(key_of(device_type, quantizer != nullptr));
  c10::intrusive_ptr<c10::TensorImpl> impl;
  if (quantizer) {
    impl = c10::make_intrusive<at::QTensorImpl>(std::move(storage), keys, dtype, std::move(quantizer));
  } else {
    // A ZeroTensor (autograd's storage-less zeros) must stay one on the other
    // side, or its empty storage would be read as data.
    const auto zero = like.key_set() & c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
    impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), keys | zero, dtype);
  }
  copy_view_bits(like, impl.get());
  return at::Tensor(std::move(impl));
}

// LITERALINCLUDE START: QUANTIZER_PARAMS_IMPL
at::QuantizerPtr map_quantizer_params(const at::Tensor& qtensor,
                                      c10::function_ref<at::Tensor(const at::Tensor&)> map) {
  at::QuantizerPtr quantizer = at::get_qtensorimpl(qtensor)->quantizer();
  const at::QScheme scheme = quantizer->qscheme();
  if (scheme != at::kPerChannelAffine && scheme != at::kPerChannelAffineFloatQParams) {
    return quantizer;
  }
  const auto* per_channel = static_cast<const at::PerChannelAffineQuantizer*>(quantizer.get());
  at::Tensor scales = map(per_channel->scales()), zero_points = map(per_channel->zero_points());
  if (scheme == at::kPerChannelAffineFloatQParams) {
    return c10::make_intrusive<at::PerChannelAffineFloatQParamsQuantizer>(
        per_channel->scalar_type(), std::move(scales), std::move(zero_points), per_channel->axis());
  }
  return c10::make_intrusive<at::PerChannelAffineQuantizer>(per_channel->scalar_type(), std::move(scales),
                                                           std::move(zero_points), per_channel->axis());
}
// LITERALINCLUDE END: QUANTIZER_PARAMS_IMPL

// LITERALINCLUDE START: HOST_ALIAS
c10::Storage& HostAliases::cpu_storage_for(const c10::Storage& emu) {
  for (Pair& p : storages_) {
    if (p.emu.unsafeGetStorageImpl() == emu.unsafeGetStorageImpl()) {
      return p.cpu;
    }
  }
  // Non-owning: the emu storage keeps the memory alive for the launch. It is
  // resizable through the (kernel-aware) CPU allocator so out= resizes work.
  c10::Storage cpu(c10::Storage::use_byte_size_t(), emu.nbytes(),
                   c10::DataPtr(emu.mutable_data(), c10::Device(c10::DeviceType::CPU)),
                   c10::GetCPUAllocator(), /*resizable=*/emu.resizable());
  storages_.push_back({emu, std::move(cpu)});
  return storages_.back().cpu;
}

at::Tensor HostAliases::alias(const at::Tensor& emu) {
  at::Tensor cpu;
  if (emu.layout() == at::kStrided) {
    at::QuantizerPtr quantizer;
    if (emu.is_quantized()) {
      quantizer = map_quantizer_params(emu, [&](const at::Tensor& p) { return is_emu(p) ? alias(p) : p; });
    }
    cpu = tensor_over(cpu_storage_for(emu.storage()), c10::DeviceType::CPU, emu.dtype(), emu, quantizer);
    inputs_.push_back({emu, cpu});
  } else {
    cpu = alias_sparse(emu);
  }
  // Some CPU kernels ask, below autograd, whether the backward will need more
  // than the result (sparse.mm with reduce="amax" keeps the argmax then).
  if (emu.requires_grad() && at::GradMode::is_enabled()) {
    cpu.set_requires_grad(true);
  }
  return cpu;
}
// LITERALINCLUDE END: HOST_ALIAS

std::optional<at::Tensor> HostAliases::alias(const std::optional<at::Tensor>& emu) {
  return emu.has_value() && emu->defined() ? std::optional<at::Tensor>(alias(*emu)) : std::nullopt;
}

// LITERALINCLUDE START: HOST_ALIAS_OUTPUTS
at::Tensor HostAliases::to_emu(const at::Tensor& cpu, c10::DeviceIndex device) {
  if (!cpu.defined() || !cpu.is_cpu()) {
    return cpu;
  }
  if (cpu.layout() != at::kStrided) {
    return sparse_to_emu(cpu, device);
  }
  for (const InputPair& in : inputs_) {
    if (in.cpu.unsafeGetTensorImpl() == cpu.unsafeGetTensorImpl()) {
      return in.emu; // in-place and out= ops return their argument itself
    }
  }
  // A quantized result's per-channel parameters become emu tensors first.
  at::QuantizerPtr quantizer;
  if (cpu.is_quantized()) {
    quantizer = map_quantizer_params(cpu, [&](const at::Tensor& p) { return to_emu(p, device); });
  }
  c10::StorageImpl* cpu_storage = cpu.storage().unsafeGetStorageImpl();
  for (const Pair& p : storages_) {
    if (p.cpu.unsafeGetStorageImpl() == cpu_storage) {
      return tensor_over(p.emu, c10::DeviceType::PrivateUse1, cpu.dtype(), cpu, quantizer); // a view of an input
    }
  }
  if (cpu_storage->data() == nullptr || is_device_ptr(cpu_storage->data())) {
    // Allocated inside the kernel: take the memory over as an emu storage.
    c10::DataPtr data = cpu_storage->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)));
    data.unsafe_set_device(c10::Device(c10::DeviceType::PrivateUse1, device));
    c10::Storage emu = emu_storage(std::move(data), cpu_storage->nbytes());
    // Other outputs sharing this storage must map to the same emu storage.
    storages_.push_back({emu, cpu.storage()});
    return tensor_over(std::move(emu), c10::DeviceType::PrivateUse1, cpu.dtype(), cpu, std::move(quantizer));
  }
  // Host memory from elsewhere (rare: a kernel returning a cached buffer).
  return cpu.to(c10::Device(c10::DeviceType::PrivateUse1, device));
}
// LITERALINCLUDE END: HOST_ALIAS_OUTPUTS

std::vector<c10::Storage> HostAliases::emu_storages() const {
  std::vector<c10::Storage> storages;
  if (making_queued_kernel()) {
    return storages; // a queued kernel does not own its memory (EmuLaunch.h)
  }
  storages.reserve(storages_.size());
  for (const Pair& p : storages_) {
    storages.push_back(p.emu);
  }
  return storages;
}

void HostAliases::sync_inputs() {
  for (Pair& p : storages_) {
    c10::StorageImpl* cpu = p.cpu.unsafeGetStorageImpl();
    c10::StorageImpl* emu = p.emu.unsafeGetStorageImpl();
    if (cpu->data() != emu->data() && cpu->data() != nullptr) {
      // The kernel grew an out= argument: its new memory came from the
      // device (kernel-aware CPU allocator), so adopt it.
      c10::DataPtr data = cpu->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)));
      data.unsafe_set_device(emu->device());
      emu->set_data_ptr_noswap(std::move(data));
    }
    if (cpu->nbytes() != emu->nbytes()) {
      emu->set_nbytes(cpu->nbytes());
    }
  }
  for (InputPair& in : inputs_) {
    const at::Tensor& cpu = in.cpu;
    if (cpu.sizes() != in.emu.sizes() || cpu.strides() != in.emu.strides() ||
        cpu.storage_offset() != in.emu.storage_offset()) {
      in.emu.unsafeGetTensorImpl()->set_sizes_and_strides(cpu.sizes(), cpu.strides(), cpu.storage_offset());
    }
  }
  sync_sparse_inputs(); // after the dense ones: their members are among those
}

} // namespace torch_emu
