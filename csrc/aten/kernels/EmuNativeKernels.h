// The native emu kernels of the common ops (see EmuKernel.h for how each is
// made from PyTorch's CPU code).
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

#include <optional>

namespace torch_emu {

// Registers them for PrivateUse1, unless TORCH_EMU_NATIVE_KERNELS=0 asks for
// the minimal operator set plus the fallback only. Called once, when the
// extension module initialises. Returns whether it registered them.
bool register_native_kernels();

// Whether register_native_kernels() registered them.
bool native_kernels_registered();

// x[i, j...] with integer (int64 or int32) indices, on emu or on the host, as
// a native kernel: the result's shape needs no data, so it is queued like any
// other. Boolean masks need nonzero and stay with the fallback (EmuSyncOps.cpp,
// which registers index.Tensor and calls this for the rest).
bool indexes_with_integers(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices);
at::Tensor index_with_integers(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices);

} // namespace torch_emu
