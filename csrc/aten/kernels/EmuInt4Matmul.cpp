// The int4 weight-only matmul of accelerators (torch._convert_weight_to_int4pack
// and torch._weight_int4pack_mm, what CUDA's tinygemm kernel serves and
// torchao's int4 layouts call on every device but CPU). CPU has its own pair
// with another packed layout (the *_for_cpu ops); emu keeps CPU's packed
// bytes inside a tensor of CUDA's shape and dtype, so code written for CUDA
// runs unchanged and the matmul is CPU's kernel.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace torch_emu {
namespace {

using at::Tensor;

// LITERALINCLUDE START: INT4_PACK
// CUDA's packed weight: int32 [n / 8][k / (innerKTiles * 16)][32][innerKTiles / 2],
// n * k / 8 words; CPU's layout of the same weight is n * k / 2 bytes.
Tensor convert_weight_to_int4pack(const Tensor& weight, int64_t inner_k_tiles) {
  TORCH_CHECK(weight.dim() == 2, "_convert_weight_to_int4pack: expected a 2-D weight, got ", weight.dim(), " dims");
  TORCH_CHECK(weight.scalar_type() == at::kByte,
              "_convert_weight_to_int4pack: expected the weight as uint8 (two 4-bit values per byte), got ",
              weight.scalar_type());
  TORCH_CHECK(inner_k_tiles == 2 || inner_k_tiles == 4 || inner_k_tiles == 8,
              "_convert_weight_to_int4pack: innerKTiles must be 2, 4 or 8, got ", inner_k_tiles);
  const int64_t n = weight.size(0), k = weight.size(1) * 2;
  TORCH_CHECK(n % 8 == 0, "_convert_weight_to_int4pack: n (", n, ") must be a multiple of 8");
  TORCH_CHECK(k % (inner_k_tiles * 16) == 0, "_convert_weight_to_int4pack: k (", k,
              ") must be a multiple of innerKTiles * 16 = ", inner_k_tiles * 16);
  // Each byte holds element 2j in its high half and 2j + 1 in its low half.
  Tensor values = at::stack({weight.__rshift__(4), weight.bitwise_and(15)}, -1).view({n, k}).to(at::kInt);
  Tensor cpu_layout = at::_convert_weight_to_int4pack_for_cpu(values, inner_k_tiles).contiguous();
  return cpu_layout.view(at::kInt).view({n / 8, k / (inner_k_tiles * 16), 32, inner_k_tiles / 2});
}

Tensor weight_int4pack_mm(const Tensor& A, const Tensor& packed, int64_t q_group_size, const Tensor& scales_and_zeros) {
  TORCH_CHECK(A.scalar_type() == at::kBFloat16, "_weight_int4pack_mm: expected A to be bfloat16, got ", A.scalar_type());
  TORCH_CHECK(packed.dim() == 4 && packed.scalar_type() == at::kInt,
              "_weight_int4pack_mm: expected the weight from _convert_weight_to_int4pack (4-D int32), got ",
              packed.dim(), "-D ", packed.scalar_type());
  const int64_t n = packed.size(0) * 8, k = packed.size(1) * packed.size(3) * 2 * 16;
  TORCH_CHECK(A.dim() == 2 && A.size(1) == k, "_weight_int4pack_mm: A must be [m, ", k, "] for this weight, got ",
              A.sizes());
  return at::_weight_int4pack_mm_for_cpu(A, packed.contiguous().view(at::kByte).view({n, k / 2}), q_group_size,
                                         scales_and_zeros);
}
// LITERALINCLUDE END: INT4_PACK

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_convert_weight_to_int4pack", TORCH_FN(convert_weight_to_int4pack));
  m.impl("_weight_int4pack_mm", TORCH_FN(weight_int4pack_mm));
}

} // namespace
} // namespace torch_emu
