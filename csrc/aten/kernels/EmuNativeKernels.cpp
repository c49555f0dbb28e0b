#include "aten/kernels/EmuNativeKernels.h"

#include <torch/library.h>

#include "runtime/emu_runtime_env.h"

namespace torch_emu {

// One function per kernel file.
void register_amp_kernels(torch::Library& m);
void register_elementwise_kernels(torch::Library& m);
void register_foreach_kernels(torch::Library& m);
void register_indexing_kernels(torch::Library& m);
void register_matmul_kernels(torch::Library& m);
void register_nn_kernels(torch::Library& m);
void register_pow_kernels(torch::Library& m);
void register_random_kernels(torch::Library& m);
void register_reduction_kernels(torch::Library& m);

// LITERALINCLUDE START: NATIVE_KERNELS_SWITCH
// Registered at run time rather than by static TORCH_LIBRARY_IMPL blocks so
// that a switch can leave them out: with TORCH_EMU_NATIVE_KERNELS=0 every one
// of these ops runs through the fallback, which is how the tests prove that
// the minimal operator set plus the fallback runs a model.
namespace {
bool g_registered = false;
} // namespace

bool register_native_kernels() {
  if (!env_bool("TORCH_EMU_NATIVE_KERNELS").value_or(true)) {
    return false;
  }
  g_registered = true;
  static torch::Library m(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  register_amp_kernels(m);
  register_elementwise_kernels(m);
  register_foreach_kernels(m);
  register_indexing_kernels(m);
  register_matmul_kernels(m);
  register_nn_kernels(m);
  register_pow_kernels(m);
  register_random_kernels(m);
  register_reduction_kernels(m);
  return true;
}
// LITERALINCLUDE END: NATIVE_KERNELS_SWITCH

bool native_kernels_registered() {
  return g_registered;
}

} // namespace torch_emu
