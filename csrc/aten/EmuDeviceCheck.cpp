#include "aten/EmuDeviceCheck.h"

#include <string>

#include "core/EmuStream.h"

namespace torch_emu {

void DeviceCheck::visit(const at::Tensor& t) {
  if (!t.defined()) {
    return;
  }
  if (t.device().type() == c10::DeviceType::PrivateUse1) {
    if (index < 0) {
      index = t.device().index();
    } else if (t.device().index() != index && other < 0) {
      other = t.device().index();
    }
  } else if (t.dim() > 0) {
    host_tensor = true;
  }
}

c10::DeviceIndex DeviceCheck::finish(const char* op) const {
  const bool mixed_host = host_tensor && index >= 0;
  TORCH_CHECK(other < 0 && !mixed_host,
              "Expected all tensors to be on the same device, but found at least two devices, emu:",
              static_cast<int>(index), " and ", other >= 0 ? "emu:" + std::to_string(other) : std::string("cpu"),
              "!", op == nullptr ? "" : " (when running " + std::string(op) + ")");
  return index < 0 ? current_device() : index;
}

} // namespace torch_emu
