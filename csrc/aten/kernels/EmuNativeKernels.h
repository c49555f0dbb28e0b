// The native emu kernels of the common ops (see EmuKernel.h for how each is
// made from PyTorch's CPU code).
#pragma once

namespace torch_emu {

// Registers them for PrivateUse1, unless TORCH_EMU_NATIVE_KERNELS=0 asks for
// the minimal operator set plus the fallback only. Called once, when the
// extension module initialises. Returns whether it registered them.
bool register_native_kernels();

} // namespace torch_emu
