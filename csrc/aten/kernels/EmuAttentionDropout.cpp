#include "aten/kernels/EmuAttentionDropout.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/PhiloxRNGEngine.h>
#include <ATen/ops/_to_copy.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace torch_emu {
namespace {

using at::Tensor;

// Rows of a 4-D tensor with unit stride along its last dim.
template <typename T>
struct Rows {
  explicit Rows(const Tensor& t)
      : data(static_cast<T*>(t.data_ptr())), s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)) {}
  T* operator()(int64_t b, int64_t h, int64_t i) const {
    return data + b * s0 + h * s1 + i * s2;
  }
  T* data;
  int64_t s0, s1, s2;
};

// The additive mask broadcast to (B, H, L, S), in the accumulation dtype.
template <typename acc_t>
struct Mask {
  Mask(const std::optional<Tensor>& mask, const Tensor& q, int64_t S) {
    if (mask.has_value()) {
      held = mask->to(c10::CppTypeToScalarType<acc_t>::value).expand({q.size(0), q.size(1), q.size(2), S});
      data = held.const_data_ptr<acc_t>();
      std::copy_n(held.strides().begin(), 4, strides);
    }
  }
  acc_t operator()(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return data == nullptr ? acc_t(0) : data[b * strides[0] + h * strides[1] + i * strides[2] + j * strides[3]];
  }
  Tensor held;
  const acc_t* data = nullptr;
  int64_t strides[4] = {};
};

// Eight independent partial sums, so that the compiler vectorises the loop
// (a single running sum is a chain it may not reorder).
template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T part[8] = {};
  int64_t e = 0;
  for (; e + 8 <= n; e += 8) {
    for (int u = 0; u < 8; ++u) part[u] += a[e + u] * b[e + u];
  }
  T sum = 0;
  for (; e < n; ++e) sum += a[e] * b[e];
  for (int u = 0; u < 8; ++u) sum += part[u];
  return sum;
}

// The kernels compute in the accumulation dtype: reduced-precision inputs
// are converted once, up front, rather than element by element in the loops.
Tensor in_acc(const Tensor& t) {
  const at::ScalarType acc = at::toOpMathType(t.scalar_type());
  return t.scalar_type() == acc ? t : t.to(acc);
}

// LITERALINCLUDE START: ROW_DROPOUT
// The dropout mask of one query row: Philox keyed by (seed, row), one draw
// per key in order, kept with probability 1 - p.
struct RowDropout {
  RowDropout(uint64_t seed, int64_t row, double p)
      : rng(seed, static_cast<uint64_t>(row), 0), threshold(static_cast<uint64_t>(p * 4294967296.0)) {}
  bool keep() {
    return rng() >= threshold;
  }
  at::Philox4_32 rng;
  uint64_t threshold;
};
// LITERALINCLUDE END: ROW_DROPOUT

struct Shape {
  explicit Shape(const Tensor& q, const Tensor& k, bool is_causal)
      : B(q.size(0)), H(q.size(1)), L(q.size(2)), E(q.size(3)), S(k.size(2)), Hkv(k.size(1)), group(H / Hkv),
        is_causal(is_causal) {}
  // Keys a query row attends to: causal attention is top-left aligned.
  int64_t keys(int64_t i) const {
    return is_causal ? std::min(i + 1, S) : S;
  }
  int64_t B, H, L, E, S, Hkv, group;
  bool is_causal;
};

// LITERALINCLUDE START: DROPOUT_FORWARD
template <typename scalar_t>
void forward_impl(const Tensor& out, const Tensor& logsumexp, const Tensor& q, const Tensor& k, const Tensor& v,
                  const std::optional<Tensor>& mask_, double p, bool is_causal, double scale, uint64_t seed) {
  using acc_t = at::opmath_type<scalar_t>;
  const Shape n(q, k, is_causal);
  const Tensor qa = in_acc(q), ka = in_acc(k), va = in_acc(v);
  const Rows<const acc_t> Q(qa), K(ka), V(va);
  const Rows<scalar_t> O(out);
  const Rows<acc_t> LSE(logsumexp.unsqueeze(-1));
  const Mask<acc_t> mask(mask_, q, n.S);
  const acc_t keep_scale = acc_t(1) / acc_t(1 - p);
  at::parallel_for(0, n.B * n.H * n.L, 1, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> w(n.S), o(n.E);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / (n.H * n.L), h = r / n.L % n.H, i = r % n.L, hk = h / n.group, keys = n.keys(i);
      const acc_t* qi = Q(b, h, i);
      acc_t max = -std::numeric_limits<acc_t>::infinity();
      for (int64_t j = 0; j < keys; ++j) {
        w[j] = dot(qi, K(b, hk, j), n.E) * acc_t(scale) + mask(b, h, i, j);
        max = std::max(max, w[j]);
      }
      std::fill(o.begin(), o.end(), acc_t(0));
      acc_t lse = -std::numeric_limits<acc_t>::infinity(); // a fully masked row attends to nothing
      if (max != lse) {
        acc_t sum = 0;
        for (int64_t j = 0; j < keys; ++j) {
          w[j] = std::exp(w[j] - max);
          sum += w[j];
        }
        lse = max + std::log(sum);
        RowDropout dropout(seed, r, p);
        for (int64_t j = 0; j < keys; ++j) {
          if (dropout.keep()) {
            const acc_t coef = w[j] / sum * keep_scale;
            const acc_t* vj = V(b, hk, j);
            for (int64_t e = 0; e < n.E; ++e) o[e] += coef * vj[e];
          }
        }
      }
      std::copy(o.begin(), o.end(), O(b, h, i));
      *LSE(b, h, i) = lse;
    }
  });
}
// LITERALINCLUDE END: DROPOUT_FORWARD

template <typename scalar_t>
void backward_impl(const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v, const Tensor& grad_scores,
                   const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& logsumexp, const std::optional<Tensor>& mask_, double p, bool is_causal,
                   double scale, uint64_t seed) {
  using acc_t = at::opmath_type<scalar_t>;
  const Shape n(q, k, is_causal);
  const Tensor qa = in_acc(q), ka = in_acc(k), va = in_acc(v), oa = in_acc(out), doa = in_acc(grad_out);
  const Rows<const acc_t> Q(qa), K(ka), V(va), O(oa), dO(doa);
  const Rows<scalar_t> dQ(grad_q), dK(grad_k), dV(grad_v);
  const Rows<const acc_t> LSE(logsumexp.unsqueeze(-1));
  acc_t* dS = grad_scores.defined() ? grad_scores.data_ptr<acc_t>() : nullptr;
  const Mask<acc_t> mask(mask_, q, n.S);
  const acc_t keep_scale = acc_t(1) / acc_t(1 - p), sc = acc_t(scale);
  // One task per (batch, key/value head): it owns that head's key and value
  // gradients and the query rows of every query head in its group.
  at::parallel_for(0, n.B * n.Hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> dk(n.S * n.E), dv(n.S * n.E), dq(n.E);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t b = t / n.Hkv, hk = t % n.Hkv;
      std::fill(dk.begin(), dk.end(), acc_t(0));
      std::fill(dv.begin(), dv.end(), acc_t(0));
      for (int64_t h = hk * n.group; h < (hk + 1) * n.group; ++h) {
        for (int64_t i = 0; i < n.L; ++i) {
          const acc_t lse = *LSE(b, h, i);
          const acc_t *qi = Q(b, h, i), *doi = dO(b, h, i);
          std::fill(dq.begin(), dq.end(), acc_t(0));
          if (lse != -std::numeric_limits<acc_t>::infinity()) {
            const acc_t D = dot(doi, O(b, h, i), n.E); // = sum_j P_ij dP_ij
            RowDropout dropout(seed, (b * n.H + h) * n.L + i, p);
            for (int64_t j = 0, keys = n.keys(i); j < keys; ++j) {
              const acc_t *kj = K(b, hk, j), *vj = V(b, hk, j);
              const acc_t prob = std::exp(dot(qi, kj, n.E) * sc + mask(b, h, i, j) - lse);
              const acc_t z = dropout.keep() ? keep_scale : acc_t(0);
              const acc_t ds = prob * (z * dot(doi, vj, n.E) - D);
              if (dS != nullptr) dS[((b * n.H + h) * n.L + i) * n.S + j] = ds;
              const acc_t pz = prob * z;
              acc_t *dkj = dk.data() + j * n.E, *dvj = dv.data() + j * n.E;
              for (int64_t e = 0; e < n.E; ++e) {
                dvj[e] += pz * doi[e];
                dq[e] += ds * kj[e];
                dkj[e] += ds * qi[e];
              }
            }
          }
          scalar_t* dqi = dQ(b, h, i);
          for (int64_t e = 0; e < n.E; ++e) dqi[e] = dq[e] * sc;
        }
      }
      for (int64_t j = 0; j < n.S; ++j) {
        scalar_t *dkj = dK(b, hk, j), *dvj = dV(b, hk, j);
        for (int64_t e = 0; e < n.E; ++e) {
          dkj[e] = dk[j * n.E + e] * sc;
          dvj[e] = dv[j * n.E + e];
        }
      }
    }
  });
}

} // namespace

void dropout_attention_forward(const Tensor& out, const Tensor& logsumexp, const Tensor& q, const Tensor& k,
                               const Tensor& v, const std::optional<Tensor>& mask, double dropout_p, bool is_causal,
                               double scale, uint64_t seed) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "dropout_attention_forward", [&] {
    forward_impl<scalar_t>(out, logsumexp, q, k, v, mask, dropout_p, is_causal, scale, seed);
  });
}

void dropout_attention_backward(const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                                const Tensor& grad_scores, const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                const Tensor& v, const Tensor& out, const Tensor& logsumexp,
                                const std::optional<Tensor>& mask, double dropout_p, bool is_causal, double scale,
                                uint64_t seed) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "dropout_attention_backward", [&] {
    backward_impl<scalar_t>(grad_q, grad_k, grad_v, grad_scores, grad_out, q, k, v, out, logsumexp, mask, dropout_p,
                            is_causal, scale, seed);
  });
}

} // namespace torch_emu
