// Sparse tensors on emu: the SparsePrivateUse1 (COO) and SparseCsrPrivateUse1
// (CSR, CSC, BSR, BSC) dispatch keys. As for dense tensors, PyTorch's CPU
// kernels run on the device memory: the global fallback is registered for the
// two sparse keys too and runs the SparseCPU / SparseCsrCPU kernel of an op on
// CPU sparse aliases (EmuSparseAlias.cpp). Ops whose CPU kernel only reads or
// writes the tensors' metadata are device-generic: registered directly, as
// CUDA does, so that they launch nothing.
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_dimI_native.h>
#include <ATen/ops/_dimV_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/SparseCsrTensorUtils.h>
#include <torch/library.h>

#include "aten/EmuFallback.h"

namespace torch_emu {

// LITERALINCLUDE START: SPARSE_FALLBACK
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&emu_fallback>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&emu_fallback>());
}
// LITERALINCLUDE END: SPARSE_FALLBACK

// LITERALINCLUDE START: SPARSE_ROUTE
// Many ops have a generic kernel for every backend, sparse keys included
// (CompositeExplicitAutograd: clone, copy_; the structured ops' generic
// kernel: mm, add...), written for dense tensors, and it wins over a backend
// fallback. CPU and CUDA register their own sparse kernels for those ops; emu
// registers the fallback, i.e. CPU's sparse kernel, for the same set of ops.
template <c10::DispatchKey cpu_key>
bool has_kernel_for(const c10::OperatorHandle& op) {
  return op.hasKernelForDispatchKey(cpu_key);
}

void route_sparse_ops_to_fallback() {
  route_to_fallback(c10::DispatchKey::SparsePrivateUse1, &has_kernel_for<c10::DispatchKey::SparseCPU>);
  route_to_fallback(c10::DispatchKey::SparseCsrPrivateUse1, &has_kernel_for<c10::DispatchKey::SparseCsrCPU>);
}
// LITERALINCLUDE END: SPARSE_ROUTE

// LITERALINCLUDE START: SPARSE_GENERIC
TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_dimI", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("_dimV", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  // Copies between devices: the members are copied with dense copy_.
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_wrapper_));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(at::native::copy_sparse_));
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse_csr));
  m.impl("values", TORCH_FN(at::native::values_sparse_csr));
  m.impl("crow_indices", TORCH_FN(at::native::crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(at::native::col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(at::native::ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(at::native::row_indices_sparse_csr));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse_csr));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_compressed_));
}
// LITERALINCLUDE END: SPARSE_GENERIC

} // namespace torch_emu
