// The global boxed fallback (EmuFallback.cpp), for the files that register it
// for more emu dispatch keys than PrivateUse1 (EmuQuantized.cpp:
// QuantizedPrivateUse1; EmuSparse.cpp: the sparse layouts).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

namespace torch_emu {

// LITERALINCLUDE START: FALLBACK_FOR_KEY
// Runs `op` with the CPU kernel of the functionality it was dispatched for
// (PrivateUse1 -> CPU, QuantizedPrivateUse1 -> QuantizedCPU, SparsePrivateUse1
// -> SparseCPU, SparseCsrPrivateUse1 -> SparseCsrCPU) on host aliases of its
// emu tensors, as one kernel on the current stream; results become emu tensors.
void emu_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack);

// A backend fallback only runs where an op has no kernel for the key, and many
// ops have a generic kernel for every backend. Registers the fallback as the
// `emu_key` kernel of every aten op that has none yet and that `wanted`
// accepts; returns their names. Called when the extension module initialises,
// after every static registration, so ops registered statically keep theirs.
std::vector<std::string> route_to_fallback(c10::DispatchKey emu_key, bool (*wanted)(const c10::OperatorHandle&));
// LITERALINCLUDE END: FALLBACK_FOR_KEY

// The callers of route_to_fallback, run by the module's initialisation.
void route_structured_ops_to_fallback();
void route_sparse_ops_to_fallback();

} // namespace torch_emu
