// LU without pivoting (torch.linalg.lu_factor / lu_factor_ex / lu with
// pivot=False), which CUDA has (cuSOLVER, MAGMA) and CPU's LAPACK has not:
// every other linear algebra op runs CPU's kernel through the fallback, and so
// does LU with pivoting. The factorization is written with emu ops (one
// column elimination per step), so it queues, is captured by graphs and checks
// its argument on the host like any op.
#include <ATen/ATen.h>
#include <ATen/core/stack.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <tuple>

#include "aten/EmuFallback.h"

namespace torch_emu {
namespace {

using at::Tensor;

bool has_lu_without_pivoting(const Tensor& A) {
  return A.scalar_type() == at::kFloat || A.scalar_type() == at::kDouble ||
      A.scalar_type() == at::kComplexFloat || A.scalar_type() == at::kComplexDouble;
}

// LITERALINCLUDE START: LU_WITHOUT_PIVOTING
// Doolittle elimination on a copy of A (batched, column-major like LAPACK's
// result). As LAPACK's getf2, a zero pivot leaves its column unscaled, the
// elimination goes on, and info names the first zero on U's diagonal (1-based).
std::tuple<Tensor, Tensor, Tensor> lu_factor_without_pivoting(const Tensor& A) {
  // CPU's meta checks (a batch of matrices, a floating or complex dtype), at the call.
  at::linalg_lu_factor_ex(A.to(at::kMeta), /*pivot=*/false);
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  Tensor LU = A.mT().clone(at::MemoryFormat::Contiguous).mT();
  for (int64_t j = 0; j + 1 < m && j < k; ++j) {
    Tensor pivot = LU.select(-1, j).select(-1, j).unsqueeze(-1);
    Tensor below = LU.select(-1, j).narrow(-1, j + 1, m - j - 1);
    below.copy_(at::where(pivot == 0, below, below / pivot));
    if (j + 1 < n) {
      Tensor right = LU.select(-2, j).narrow(-1, j + 1, n - j - 1);
      LU.narrow(-2, j + 1, m - j - 1).narrow(-1, j + 1, n - j - 1).sub_(below.unsqueeze(-1) * right.unsqueeze(-2));
    }
  }
  auto batch = A.sizes().slice(0, A.dim() - 2).vec();
  auto pivots_shape = batch;
  pivots_shape.push_back(k);
  // The identity permutation, as CUDA returns it: 1..k in every batch element.
  Tensor pivots = at::arange(1, k + 1, A.options().dtype(at::kInt)).expand(pivots_shape).contiguous();
  Tensor zero_on_diagonal = LU.diagonal(0, -2, -1) == 0;
  Tensor info = k == 0 ? at::zeros(batch, A.options().dtype(at::kInt))
                       : at::where(zero_on_diagonal.any(-1), zero_on_diagonal.to(at::kInt).argmax(-1) + 1, 0).to(at::kInt);
  return {LU, pivots, info};
}
// LITERALINCLUDE END: LU_WITHOUT_PIVOTING

// An out= form checks its outputs (the stack's arguments from `first` on) as
// structured ops do, then takes the results and returns them.
std::array<Tensor, 3> into_outs(const std::array<Tensor, 3>& results, const torch::jit::Stack& stack,
                                size_t arguments, size_t first) {
  std::array<Tensor, 3> outs;
  for (size_t i = 0; i < results.size(); ++i) {
    const Tensor& result = results[i];
    outs[i] = torch::jit::peek(stack, first + i, arguments).toTensor();
    TORCH_CHECK(outs[i].device() == result.device(), "Expected out tensor to have device ", result.device(),
                ", but got ", outs[i].device(), " instead");
    TORCH_CHECK(outs[i].scalar_type() == result.scalar_type(), "Expected out tensor to have dtype ",
                result.scalar_type(), ", but got ", outs[i].scalar_type(), " instead");
    at::native::resize_output(outs[i], result.sizes());
    outs[i].copy_(result);
  }
  return outs;
}

// Replaces the op's arguments on the stack by its results, in the out=
// tensors for an out= form.
void push_results(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t arguments, size_t first_out,
                  std::array<Tensor, 3> results) {
  if (op.schema().overload_name() == "out") {
    results = into_outs(results, *stack, arguments, first_out);
  }
  torch::jit::drop(*stack, arguments);
  torch::jit::push(*stack, results[0], results[1], results[2]);
}

// Arguments on the stack: A, pivot, then check_errors for lu_factor_ex, then
// the out= tensors of an out= form.
bool wants_lu_without_pivoting(const torch::jit::Stack& stack, size_t arguments) {
  const Tensor& A = torch::jit::peek(stack, 0, arguments).toTensor();
  return !torch::jit::peek(stack, 1, arguments).toBool() && has_lu_without_pivoting(A);
}

// aten::linalg_lu_factor_ex(A, *, pivot, check_errors) and its out= form.
void lu_factor_ex(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const size_t arguments = op.schema().arguments().size();
  if (!wants_lu_without_pivoting(*stack, arguments)) {
    return emu_fallback(op, keys, stack);
  }
  const Tensor A = torch::jit::peek(*stack, 0, arguments).toTensor();
  const bool check_errors = torch::jit::peek(*stack, 2, arguments).toBool();
  auto [LU, pivots, info] = lu_factor_without_pivoting(A);
  if (check_errors) {
    at::_linalg_check_errors(info, "torch.linalg.lu_factor_ex", A.dim() == 2);
  }
  push_results(op, stack, arguments, /*first_out=*/3, {LU, pivots, info});
}

// aten::linalg_lu(A, *, pivot) and its out= form: P is empty without pivoting.
void lu(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const size_t arguments = op.schema().arguments().size();
  if (!wants_lu_without_pivoting(*stack, arguments)) {
    return emu_fallback(op, keys, stack);
  }
  const Tensor A = torch::jit::peek(*stack, 0, arguments).toTensor();
  auto [LU, pivots, info] = lu_factor_without_pivoting(A);
  auto [P, L, U] = at::lu_unpack(LU, pivots, /*unpack_data=*/true, /*unpack_pivots=*/false);
  push_results(op, stack, arguments, /*first_out=*/2, {at::empty({0}, A.options()), L, U});
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("linalg_lu_factor_ex", torch::CppFunction::makeFromBoxedFunction<&lu_factor_ex>());
  m.impl("linalg_lu_factor_ex.out", torch::CppFunction::makeFromBoxedFunction<&lu_factor_ex>());
  m.impl("linalg_lu", torch::CppFunction::makeFromBoxedFunction<&lu>());
  m.impl("linalg_lu.out", torch::CppFunction::makeFromBoxedFunction<&lu>());
}

} // namespace
} // namespace torch_emu
