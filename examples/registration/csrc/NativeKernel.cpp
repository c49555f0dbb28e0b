// Scenario 1: a built-in aten operator with a native emu kernel.
//
// aten::hardswish has a CPU kernel and no generic backend kernel, so without
// this file it reaches the global boxed fallback (EmuFallback.cpp). Here it
// gets an unboxed kernel of its own: the dispatcher calls it directly with
// typed arguments, with no stack of IValues to walk and rewrite. The kernel is
// what a vendor writes: allocate the output on the device, then launch device
// code on the current stream. Emu's "device code" is PyTorch's CPU kernel run
// on host aliases of the device buffers.
#include <ATen/ops/empty_like.h>
#include <ATen/ops/hardswish_cpu_dispatch.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/EmuHostAlias.h"
#include "core/EmuLaunch.h"
#include "core/EmuStream.h"

namespace torch_emu {
namespace {

// LITERALINCLUDE START: NATIVE_KERNEL
at::Tensor emu_hardswish(const at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  // The output is allocated on the device, outside the kernel, like on a GPU.
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  HostAliases aliases;
  const at::Tensor in_host = aliases.alias(self);
  at::Tensor out_host = aliases.alias(out);
  // Device code: touches device memory only inside the launch.
  launch_kernel(current_stream(self.device().index()), [&] {
    at::cpu::hardswish_out(out_host, in_host);
  });
  return out;
}
// LITERALINCLUDE END: NATIVE_KERNEL

} // namespace

// LITERALINCLUDE START: NATIVE_KERNEL_REGISTER
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("hardswish", TORCH_FN(emu_hardswish));
}
// LITERALINCLUDE END: NATIVE_KERNEL_REGISTER

} // namespace torch_emu
