// Fused attention with dropout, emu's own kernel: CPU's flash attention has no
// dropout to reuse. One pass over each query row (scores, softmax, dropout and
// the weighted sum of values, never the whole attention matrix), the dropout
// mask drawn from Philox keyed by (seed, row), so the backward replays it
// from the seed alone. Called inside a launch, on emu tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace torch_emu {

// q (B, H, L, E), k and v (B, Hkv, S, E) with Hkv dividing H, each with unit
// stride along E; mask: additive, broadcasting to (B, H, L, S). Writes `out`
// (like q) and `logsumexp` (B, H, L, in q's accumulation dtype).
void dropout_attention_forward(const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& q,
                               const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& mask,
                               double dropout_p, bool is_causal, double scale, uint64_t seed);

// The gradients of q, k, v (written in place, laid out like them) and, if
// `grad_scores` is defined, the gradient of the scores (B, H, L, S) in the
// accumulation dtype: the gradient of an additive mask before reduction.
void dropout_attention_backward(const at::Tensor& grad_q, const at::Tensor& grad_k, const at::Tensor& grad_v,
                                const at::Tensor& grad_scores, const at::Tensor& grad_out, const at::Tensor& q,
                                const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                const at::Tensor& logsumexp, const std::optional<at::Tensor>& mask,
                                double dropout_p, bool is_causal, double scale, uint64_t seed);

} // namespace torch_emu
