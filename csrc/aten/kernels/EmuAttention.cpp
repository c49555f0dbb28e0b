// Fused attention. F.scaled_dot_product_attention asks the _fused_sdp_choice
// DispatchStub of the query's device type which backend to run. For an
// out-of-tree device PyTorch reserves SDPBackend::overrideable and two
// operators, _scaled_dot_product_fused_attention_overrideable and its
// backward, with no CPU kernel for the fallback to run. Emu's chooser picks
// them whenever its kernels support the inputs and MATH otherwise; the kernels
// run CPU's flash attention (the code behind
// _scaled_dot_product_flash_attention_for_cpu) on device memory, as one launch
// on the current stream, and emu's own fused kernel when there is dropout
// (EmuAttentionDropout.h), which CPU's has not. Everything here is required
// for attention to work at all, so it is registered statically.
#include <ATen/Context.h>
#include <ATen/OpMathType.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/StringUtil.h>
#include <torch/library.h>

#include <limits>
#include <mutex>
#include <string>

#include "aten/kernels/EmuAttentionDropout.h"
#include "aten/kernels/EmuKernel.h"

namespace torch_emu {
namespace {

using at::Tensor;

// LITERALINCLUDE START: CONSTRAINTS
// Why emu's fused kernels cannot run these inputs, or "" if they can: dense
// 4-D inputs with one head dim and a unit stride along it, floating dtypes,
// causal and additive masks that broadcast to (batch, heads, L, S),
// grouped-query attention, dropout. CPU's flash kernel takes all but dropout,
// emu's dropout kernel (EmuAttentionDropout.h) the same with dropout.
std::string fused_unsupported(const sdp::sdp_params& p) {
  const Tensor &q = p.query, &k = p.key, &v = p.value;
  if (q.is_nested() || k.is_nested() || v.is_nested()) {
    return "nested tensors are not supported";
  }
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) {
    return c10::str("query, key and value must be 4-D (batch, heads, seq_len, head_dim), got ", q.dim(), "-D, ",
                    k.dim(), "-D and ", v.dim(), "-D");
  }
  const auto dtype = q.scalar_type();
  const bool kernel_dtype = dtype == at::kFloat || dtype == at::kDouble || dtype == at::kBFloat16 || dtype == at::kHalf;
  if (!kernel_dtype || k.scalar_type() != dtype || v.scalar_type() != dtype) {
    return c10::str("query, key and value must have one dtype of float32, float64, bfloat16 or float16, got ",
                    q.scalar_type(), ", ", k.scalar_type(), " and ", v.scalar_type());
  }
  if (p.dropout < 0.0 || p.dropout >= 1.0) {
    return c10::str("dropout_p must be in [0, 1), got ", p.dropout);
  }
  if (q.sym_size(0) != k.sym_size(0) || q.sym_size(0) != v.sym_size(0)) {
    return c10::str("query, key and value must have one batch size, got ", q.sizes(), ", ", k.sizes(), " and ",
                    v.sizes());
  }
  const c10::SymInt &hq = q.sym_size(1), &hk = k.sym_size(1), &hv = v.sym_size(1);
  const bool gqa = p.enable_gqa && hk == hv && hq % hk == 0;
  if (!(hq == hk && hq == hv) && !gqa) {
    return c10::str("query, key and value must have one number of heads (or, with enable_gqa=True, key and value ",
                    "heads dividing query heads), got ", hq, ", ", hk, " and ", hv);
  }
  if (q.sym_size(3) != k.sym_size(3) || q.sym_size(3) != v.sym_size(3)) {
    return c10::str("query, key and value must have one head dim, got ", q.sym_size(3), ", ", k.sym_size(3), " and ",
                    v.sym_size(3));
  }
  if (q.sym_size(2) == 0 || k.sym_size(2) == 0) {
    return "sequence lengths must not be 0";
  }
  if (q.sym_stride(3) != 1 || k.sym_stride(3) != 1 || v.sym_stride(3) != 1) {
    return c10::str("query, key and value must have stride 1 along the head dim, got ", q.sym_stride(3), ", ",
                    k.sym_stride(3), " and ", v.sym_stride(3));
  }
  if (p.attn_mask.has_value()) {
    const Tensor& mask = *p.attn_mask;
    const std::array<c10::SymInt, 4> full{q.sym_size(0), hq, q.sym_size(2), k.sym_size(2)};
    bool broadcasts = mask.dim() <= 4;
    for (int64_t i = 1; broadcasts && i <= mask.dim(); ++i) {
      const c10::SymInt& m = mask.sym_size(-i);
      broadcasts = m == 1 || m == full[4 - i];
    }
    if (!broadcasts) {
      return c10::str("attn_mask of shape ", mask.sym_sizes(), " does not broadcast to (batch, heads, L, S) = ",
                      c10::SymIntArrayRef(full));
    }
  }
  return "";
}
// LITERALINCLUDE END: CONSTRAINTS

// LITERALINCLUDE START: CHOOSER
// The PrivateUse1 slot of _fused_sdp_choice_stub, and emu's kernel of the
// aten::_fused_sdp_choice operator. Like CUDA's chooser it honours
// torch.nn.attention.sdpa_kernel (the global context's enabled backends) and
// fails with the reason when no enabled backend can run the inputs. Its order
// is fixed, as CPU's and XPU's are: the fused kernels first, except that with
// dropout MATH comes first when enabled: emu's dropout kernel goes row by
// row, without matrix products, and is no faster than MATH's batched matmuls
// (L=512: about equal in float32, 3.7x slower in bfloat16). Float64 goes to
// MATH too, as on CUDA, whose fused kernels lack it: MATH's backward is
// differentiable again (gradgrad), the fused kernel's is not.
int64_t fused_sdp_choice(const Tensor& query, const Tensor& key, const Tensor& value,
                         const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  const sdp::sdp_params params{query, key, value, attn_mask, dropout_p, is_causal, enable_gqa};
  const at::Context& ctx = at::globalContext();
  const std::string fused_not = fused_unsupported(params);
  const bool math_first = (dropout_p > 0.0 || query.scalar_type() == at::kDouble) && ctx.userEnabledMathSDP();
  if (ctx.userEnabledOverrideableSDP() && fused_not.empty() && !math_first) {
    return static_cast<int64_t>(sdp::SDPBackend::overrideable);
  }
  if (ctx.userEnabledMathSDP()) {
    return static_cast<int64_t>(sdp::SDPBackend::math);
  }
  TORCH_CHECK(false,
              "scaled_dot_product_attention on emu: no available kernel. Emu runs SDPBackend.OVERRIDEABLE (its fused "
              "kernel) and SDPBackend.MATH; MATH is disabled by sdpa_kernel() and OVERRIDEABLE ",
              ctx.userEnabledOverrideableSDP() ? "cannot run these inputs: " + fused_not : std::string("is disabled"),
              ".");
}
// LITERALINCLUDE END: CHOOSER

// The same constraints on a direct call of the operator, where key and value
// having fewer heads than the query means grouped-query attention.
void check_fused_inputs(const Tensor& query, const Tensor& key, const Tensor& value,
                        const std::optional<Tensor>& attn_bias, double dropout_p) {
  const bool gqa = query.dim() == 4 && key.dim() == 4 && query.size(1) != key.size(1);
  const std::string why = fused_unsupported({query, key, value, attn_bias, dropout_p, false, gqa});
  TORCH_CHECK(why.empty(), "_scaled_dot_product_fused_attention_overrideable on emu: ", why);
  TORCH_CHECK(!attn_bias.has_value() || attn_bias->scalar_type() == query.scalar_type() ||
                  attn_bias->scalar_type() == at::kFloat,
              "_scaled_dot_product_fused_attention_overrideable on emu: attn_bias must be an additive mask of the "
              "query's dtype or float32, got ",
              attn_bias.has_value() ? attn_bias->scalar_type() : at::kFloat,
              " (scaled_dot_product_attention converts boolean masks before calling this operator)");
}

// CPU's kernel takes a 2-D or 4-D additive mask whose last dim has stride 1
// or 0; any mask that broadcasts to (batch, heads, L, S) is made one, as a view
// when possible.
std::optional<Tensor> kernel_mask(const std::optional<Tensor>& bias) {
  if (!bias.has_value() || !bias->defined()) {
    return std::nullopt;
  }
  Tensor mask = *bias;
  while (mask.dim() != 2 && mask.dim() < 4) {
    mask = mask.unsqueeze(0);
  }
  if (mask.size(-1) > 1 && mask.stride(-1) > 1) {
    mask = mask.contiguous();
  }
  return mask;
}

// A seed for the dropout mask from the device's default generator (its CPU
// generator: the state torch.manual_seed and get_rng_state see).
uint64_t draw_seed(c10::DeviceIndex device) {
  EmuGeneratorImpl* emu_gen = emu_generator_for(std::nullopt, device);
  emu_gen->wait_for_draws(); // a draw on the host: after the queued ones
  at::Generator gen = emu_gen->cpu_generator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get<at::CPUGeneratorImpl>()->random64();
}

// CPU's flash kernels, into outputs allocated at launch (so they are
// queued). They take output, logsumexp and gradients with the sequence dim
// before the heads.
void flash_forward(const Tensor& out, const Tensor& logsumexp, const Tensor& query, const Tensor& key,
                   const Tensor& value, const std::optional<Tensor>& mask, bool is_causal, std::optional<double> scale) {
  at::native::flash_attention_kernel(c10::DeviceType::CPU, out.transpose(1, 2), logsumexp.transpose(1, 2), query, key,
                                     value, /*dropout_p=*/0.0, is_causal, mask, scale);
}

// The gradients start at zero: CPU's kernel accumulates into them.
void flash_backward(const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v, const Tensor& grad_out,
                    const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& out,
                    const Tensor& logsumexp, const std::optional<Tensor>& mask, bool is_causal,
                    std::optional<double> scale) {
  at::native::flash_attention_backward_kernel(
      c10::DeviceType::CPU, grad_q.transpose(1, 2), grad_k.transpose(1, 2), grad_v.transpose(1, 2),
      grad_out.transpose(1, 2), query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), out.transpose(1, 2),
      logsumexp.transpose(1, 2), /*dropout_p=*/0.0, is_causal, mask, scale);
}

// LITERALINCLUDE START: OP_FORWARD
std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor> fused_attention(
    const Tensor& query, const Tensor& key, const Tensor& value, const std::optional<Tensor>& attn_bias,
    double dropout_p, bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  const c10::DeviceIndex device = kernel::common_device(query, key, value, attn_bias);
  check_fused_inputs(query, key, value, attn_bias, dropout_p);
  TORCH_CHECK(!return_debug_mask,
              "_scaled_dot_product_fused_attention_overrideable on emu: return_debug_mask=True is not supported (the "
              "fused kernel never forms the attention matrix)");
  // The output in the query's layout and a (batch, heads, L) logsumexp, as
  // the operator's meta function allocates them.
  Tensor out = at::empty_like(query);
  Tensor logsumexp =
      at::empty({query.size(0), query.size(1), query.size(2)}, query.options().dtype(at::toOpMathType(query.scalar_type())));
  if (dropout_p > 0.0) {
    // The dropout mask is keyed by a seed drawn from the device's generator:
    // the same torch.manual_seed gives the same mask, and the backward
    // replays it from the saved seed.
    const uint64_t seed = draw_seed(device);
    kernel::run_on(device, [&] {
      dropout_attention_forward(out, logsumexp, query, key, value, attn_bias, dropout_p, is_causal,
                                sdp::calculate_scale(query, scale).expect_float(), seed);
    });
    return {out, logsumexp, Tensor(), Tensor(), query.sym_size(2), key.sym_size(2),
            at::scalar_tensor(static_cast<int64_t>(seed), at::kLong), at::zeros({}, at::kLong), Tensor()};
  }
  // Without dropout there is no random state (seed and offset are 0), and
  // the kernel is queued.
  kernel::OnDevice<&flash_forward>::call(out, logsumexp, query, key, value, kernel_mask(attn_bias), is_causal, scale);
  return {out, logsumexp, Tensor(), Tensor(), query.sym_size(2), key.sym_size(2), at::zeros({}, at::kLong),
          at::zeros({}, at::kLong), Tensor()};
}
// LITERALINCLUDE END: OP_FORWARD

// LITERALINCLUDE START: BIAS_GRAD
// The gradient of an additive mask is the gradient of the scores,
// dS = P * (dO V^T - rowsum(dO * O)), which a flash kernel never forms: it is
// computed here from the saved logsumexp (P = exp(S - lse)) with two batched
// matmuls, in the kernel's accumulation dtype, then summed over the dims the
// mask was broadcast along.
Tensor bias_grad(const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& bias, const Tensor& out, const Tensor& logsumexp, bool is_causal,
                 std::optional<double> scale) {
  const at::ScalarType acc = at::toOpMathType(query.scalar_type());
  const int64_t group = query.size(1) / key.size(1);
  const Tensor k = key.repeat_interleave(group, 1).to(acc), v = value.repeat_interleave(group, 1).to(acc);
  const Tensor go = grad_out.to(acc);
  Tensor scores = at::matmul(query.to(acc), k.transpose(-2, -1)).mul_(sdp::calculate_scale(query, scale).expect_float());
  scores.add_(bias.to(acc));
  if (is_causal) {
    const Tensor above = at::ones({query.size(2), key.size(2)}, query.options().dtype(at::kBool)).triu_(1);
    scores.masked_fill_(above, -std::numeric_limits<double>::infinity());
  }
  const Tensor probs = scores.sub_(logsumexp.unsqueeze(-1)).exp_();
  const Tensor dsum = go.mul(out.to(acc)).sum(-1, /*keepdim=*/true);
  return probs.mul_(at::matmul(go, v.transpose(-2, -1)).sub_(dsum)).sum_to_size(bias.sizes()).to(bias.scalar_type());
}
// LITERALINCLUDE END: BIAS_GRAD

// LITERALINCLUDE START: OP_BACKWARD
std::tuple<Tensor, Tensor, Tensor, Tensor> fused_attention_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_bias,
    std::array<bool, 4> grad_input_mask, const Tensor& out, const Tensor& logsumexp, const Tensor& cum_seq_q,
    const Tensor& cum_seq_k, int64_t max_q, int64_t max_k, double dropout_p, bool is_causal,
    const Tensor& philox_seed, const Tensor& philox_offset, std::optional<double> scale) {
  const c10::DeviceIndex device = kernel::common_device(grad_out, query, key, value, attn_bias, out, logsumexp);
  if (!grad_out.defined()) {
    return {};
  }
  const std::optional<Tensor> bias = attn_bias.defined() ? std::optional<Tensor>(attn_bias) : std::nullopt;
  check_fused_inputs(query, key, value, bias, dropout_p);
  // Both kernels read the output gradient along the head dim with unit
  // stride (autograd may hand in an expanded one).
  const Tensor go = grad_out.stride(-1) == 1 ? grad_out : grad_out.contiguous();
  if (dropout_p > 0.0) {
    return kernel::run_on(device, [&] {
      // Emu's kernel writes every gradient element and, for the mask, the
      // gradient of the scores.
      Tensor grad_q = at::empty_like(query), grad_k = at::empty_like(key), grad_v = at::empty_like(value), grad_bias;
      const bool mask_grad = grad_input_mask[3] && bias.has_value();
      const Tensor grad_scores = mask_grad ? at::zeros({query.size(0), query.size(1), query.size(2), key.size(2)},
                                                       logsumexp.options())
                                           : Tensor();
      dropout_attention_backward(grad_q, grad_k, grad_v, grad_scores, go, query, key, value, out, logsumexp, bias,
                                 dropout_p, is_causal, sdp::calculate_scale(query, scale).expect_float(),
                                 static_cast<uint64_t>(philox_seed.item<int64_t>()));
      if (mask_grad) {
        grad_bias = grad_scores.sum_to_size(attn_bias.sizes()).to(attn_bias.scalar_type());
      }
      return std::make_tuple(grad_q, grad_k, grad_v, grad_bias);
    });
  }
  // Laid out like the inputs, as the meta function has them.
  Tensor grad_q = at::zeros_like(query), grad_k = at::zeros_like(key), grad_v = at::zeros_like(value), grad_bias;
  kernel::OnDevice<&flash_backward>::call(grad_q, grad_k, grad_v, go, query, key, value, out, logsumexp,
                                          kernel_mask(bias), is_causal, scale);
  if (grad_input_mask[3] && bias.has_value()) {
    grad_bias = bias_grad(go, query, key, value, attn_bias, out, logsumexp, is_causal, scale);
  }
  return {grad_q, grad_k, grad_v, grad_bias};
}
// LITERALINCLUDE END: OP_BACKWARD

// LITERALINCLUDE START: REGISTER
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(fused_attention));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(fused_attention_backward));
}

} // namespace
} // namespace torch_emu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_emu::fused_sdp_choice)
} // namespace at::native
// LITERALINCLUDE END: REGISTER
