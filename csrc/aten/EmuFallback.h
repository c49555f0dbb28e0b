// The global boxed fallback (EmuFallback.cpp), for the files that register it
// for more dispatch keys than PrivateUse1 (EmuSparse.cpp: the sparse layouts).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_emu {

// Runs `op` with the CPU kernel of the functionality it was dispatched for
// (PrivateUse1 -> CPU, SparsePrivateUse1 -> SparseCPU, SparseCsrPrivateUse1
// -> SparseCsrCPU) on the device memory of its emu arguments.
void emu_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack);

// Sends every aten op with a SparseCPU (SparseCsrCPU) kernel and no
// SparsePrivateUse1 (SparseCsrPrivateUse1) kernel to the fallback
// (EmuSparse.cpp). Called once, when the extension module initialises.
void route_sparse_ops_to_fallback();

} // namespace torch_emu
