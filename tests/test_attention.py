"""Fused attention on emu (csrc/aten/kernels/EmuAttention.cpp, EmuAttentionDropout.cpp):
emu's SDPA chooser picks SDPBackend.OVERRIDEABLE when its kernels support the
inputs and MATH otherwise (and first for dropout), honouring sdpa_kernel(); the
overrideable ops (forward, backward, with and without dropout) match CPU and
math; a Hugging Face model trains through them with CPU's losses; bad inputs
are clear errors."""

from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

OVERRIDEABLE, MATH = SDPBackend.OVERRIDEABLE.value, SDPBackend.MATH.value
FUSED_OPS = {
    "aten::_scaled_dot_product_fused_attention_overrideable",
    "aten::_scaled_dot_product_fused_attention_overrideable_backward",
}
# The math backend is a composite of ordinary ops; its softmax marks it.
MATH_OP = "aten::_safe_softmax"


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def qkv(b=2, h=4, lq=16, lk=20, e=32, hk=None, dtype=torch.float32, seq_first=False):
    """q, k, v on CPU; seq_first gives the (batch, seq, heads, dim) layout
    transposed to (batch, heads, seq, dim), as transformer models make them."""
    shapes = [(b, h, lq, e), (b, hk or h, lk, e), (b, hk or h, lk, e)]
    if seq_first:
        return [rand(s[0], s[2], s[1], s[3], dtype=dtype, seed=i).transpose(1, 2) for i, s in enumerate(shapes)]
    return [rand(*s, dtype=dtype, seed=i) for i, s in enumerate(shapes)]


def masked_row(mask, value):
    """`mask` with its row 3 masked out entirely: that query attends to nothing."""
    mask[3] = value
    return mask


def run(device, q, k, v, mask=None, **kwargs):
    """Forward and backward of SDPA on `device`: the output and the gradients
    of q, k, v and (for a float mask) the mask."""
    q, k, v = (t.detach().to(device).requires_grad_() for t in (q, k, v))
    if mask is not None:
        mask = mask.detach().to(device)
        mask.requires_grad_(mask.is_floating_point())
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)
    out.backward(rand(*out.shape, dtype=out.dtype, seed=9).to(device))
    grads = [q.grad, k.grad, v.grad] + ([mask.grad] if mask is not None and mask.requires_grad else [])
    return [t.cpu() for t in [out, *grads]]


class OpLog(TorchDispatchMode):
    """The names of the aten operators run under it, backward ones included
    (autograd's worker threads inherit the mode)."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func._schema.name)
        return func(*args, **(kwargs or {}))


def op_names(fn):
    with OpLog() as log:
        fn()
    return log.names


def choice(q, k, v, **kwargs):
    return torch._fused_sdp_choice(q.to("emu"), k.to("emu"), v.to("emu"), **kwargs)


# (name, make(dtype) -> (q, k, v, mask), sdpa kwargs)
CASES = [
    ("plain", lambda dt: (*qkv(dtype=dt), None), {}),
    ("causal", lambda dt: (*qkv(lq=20, dtype=dt), None), {"is_causal": True}),
    ("causal_l_lt_s", lambda dt: (*qkv(dtype=dt), None), {"is_causal": True}),
    ("float_mask_2d", lambda dt: (*qkv(dtype=dt), rand(16, 20, dtype=dt, seed=5)), {}),
    ("float_mask_4d_bcast", lambda dt: (*qkv(dtype=dt), rand(2, 1, 16, 20, dtype=dt, seed=5)), {}),
    ("bool_mask", lambda dt: (*qkv(dtype=dt), rand(1, 4, 16, 20, seed=5) > -1.0), {}),
    ("bool_mask_masked_row", lambda dt: (*qkv(dtype=dt), masked_row(torch.ones(16, 20, dtype=torch.bool), False)), {}),
    ("float_mask_masked_row", lambda dt: (*qkv(dtype=dt), masked_row(rand(16, 20, dtype=dt, seed=5), -torch.inf)), {}),
    ("scale", lambda dt: (*qkv(dtype=dt), None), {"scale": 0.3}),
    ("seq_first_layout", lambda dt: (*qkv(dtype=dt, seq_first=True), None), {"is_causal": True}),
    ("gqa", lambda dt: (*qkv(h=8, hk=2, dtype=dt), None), {"enable_gqa": True}),
]


@pytest.mark.parametrize("backend", [SDPBackend.OVERRIDEABLE, SDPBackend.MATH], ids=["overrideable", "math"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name,make,kwargs", CASES, ids=[c[0] for c in CASES])
def test_matches_cpu(backend, dtype, name, make, kwargs):
    q, k, v, mask = make(dtype)
    # The reference: CPU's own choice (flash or math) for the fused kernel,
    # CPU's math for math.
    with nullcontext() if backend == SDPBackend.OVERRIDEABLE else sdpa_kernel([SDPBackend.MATH]):
        expected = run("cpu", q, k, v, mask, **kwargs)
    actual = []
    with sdpa_kernel([backend]):
        names = op_names(lambda: actual.extend(run("emu", q, k, v, mask, **kwargs)))
    tol = {} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e, **tol)
    if backend == SDPBackend.OVERRIDEABLE:
        assert FUSED_OPS <= names and MATH_OP not in names
    else:
        assert MATH_OP in names and not FUSED_OPS & names


def test_chooser_picks_overrideable_when_the_kernel_can_and_math_otherwise():
    q, k, v = qkv()
    assert choice(q, k, v) == OVERRIDEABLE
    assert choice(q, k, v, attn_mask=rand(16, 20), is_causal=False, scale=0.5) == OVERRIDEABLE
    assert choice(*qkv(h=8, hk=2), enable_gqa=True) == OVERRIDEABLE
    assert choice(*qkv(dtype=torch.bfloat16)) == OVERRIDEABLE
    # Dropout: MATH first (emu's dropout kernel is no faster), unless disabled.
    assert choice(q, k, v, dropout_p=0.1) == MATH
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        assert choice(q, k, v, dropout_p=0.1, is_causal=True) == OVERRIDEABLE
    # What the fused kernels cannot do goes to MATH.
    assert choice(*qkv(h=8, hk=2)) == MATH  # fewer key heads without enable_gqa
    assert choice(q[0], k[0], v[0]) == MATH  # 3-D
    assert choice(q.transpose(2, 3).contiguous().transpose(2, 3), k, v) == MATH  # head dim not unit-stride
    assert choice(*qkv(e=32)[:2], rand(2, 4, 20, 16)) == MATH  # value head dim differs
    assert choice(q, k, v, attn_mask=rand(3, 16, 20)) == MATH  # mask does not broadcast
    assert choice(*qkv(dtype=torch.float16)) == OVERRIDEABLE
    # Float64: MATH first, as on CUDA (whose fused kernels lack it), unless disabled.
    assert choice(*qkv(dtype=torch.float64)) == MATH
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        assert choice(*qkv(dtype=torch.float64)) == OVERRIDEABLE
    with sdpa_kernel([SDPBackend.MATH]):
        assert choice(q, k, v) == MATH


def test_float64_attention_is_twice_differentiable(baseline_memory):
    q, k, v = (t.to("emu").requires_grad_() for t in qkv(b=1, h=2, lq=3, lk=4, e=2, dtype=torch.float64))
    assert torch.autograd.gradgradcheck(F.scaled_dot_product_attention, (q, k, v))


def test_forcing_overrideable_on_unsupported_inputs_names_the_reason(baseline_memory):
    q, k, v = (t.to("emu") for t in qkv())
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        with pytest.raises(RuntimeError, match="OVERRIDEABLE cannot run these inputs: query, key and value must be 4-D"):
            F.scaled_dot_product_attention(q[0], k[0], v[0])
        with pytest.raises(RuntimeError, match="one number of heads"):
            F.scaled_dot_product_attention(q, k[:, :2], v[:, :2])
        with pytest.raises(RuntimeError, match="one head dim"):
            F.scaled_dot_product_attention(q, k[..., :16], v)
    # Emu has no FLASH_ATTENTION backend of its own (that is CPU's kernel).
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        with pytest.raises(RuntimeError, match="no available kernel.*OVERRIDEABLE is disabled"):
            F.scaled_dot_product_attention(q, k, v)


def test_bad_inputs_are_clear_errors(baseline_memory):
    q, k, v = qkv()
    eq, ek, ev = (t.to("emu") for t in (q, k, v))
    # Mismatched head dims: MATH's matmul names the shapes, as on CPU.
    with pytest.raises(RuntimeError, match="size"):
        F.scaled_dot_product_attention(eq, ek[..., :16], ev)
    with pytest.raises(RuntimeError, match="same device"):
        F.scaled_dot_product_attention(eq, k, ev)
    with pytest.raises(RuntimeError, match="same device"):
        F.scaled_dot_product_attention(eq, ek.to("emu:1"), ev)
    with pytest.raises(RuntimeError, match="attn_mask dtype"):
        F.scaled_dot_product_attention(eq, ek, ev, attn_mask=torch.zeros(16, 20, dtype=torch.int32, device="emu"))
    # The operator itself, called directly.
    op = torch.ops.aten._scaled_dot_product_fused_attention_overrideable
    with pytest.raises(RuntimeError, match="emu:0 and cpu"):
        op(eq, k, ev)
    with pytest.raises(RuntimeError, match="emu:0 and emu:1"):
        op(eq, ek, ev.to("emu:1"))
    with pytest.raises(RuntimeError, match=r"dropout_p must be in \[0, 1\), got 1"):
        op(eq, ek, ev, dropout_p=1.0)
    with pytest.raises(RuntimeError, match="converts boolean masks"):
        op(eq, ek, ev, torch.ones(16, 20, dtype=torch.bool, device="emu"))
    with pytest.raises(RuntimeError, match="return_debug_mask"):
        op(eq, ek, ev, return_debug_mask=True)


def test_operator_outputs_and_backward_match_cpu_flash(baseline_memory):
    """The operators called directly: output in the query's layout (the meta
    function's), logsumexp, sizes; the backward equals CPU's flash backward."""
    q, k, v = qkv(seq_first=True)
    mask = rand(16, 20, seed=5)
    out, lse, _, _, max_q, max_k, seed, offset, _ = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        q.to("emu"), k.to("emu"), v.to("emu"), mask.to("emu"), scale=0.25
    )
    ref, ref_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask, scale=0.25)
    assert (max_q, max_k) == (16, 20) and out.stride() == q.stride() and lse.is_contiguous()
    torch.testing.assert_close(out.cpu(), ref)
    torch.testing.assert_close(lse.cpu(), ref_lse)
    grad = rand(*out.shape, seed=7)
    dq, dk, dv, dmask = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
        grad.to("emu"), q.to("emu"), k.to("emu"), v.to("emu"), mask.to("emu"), [True] * 4, out, lse,
        torch.empty(0), torch.empty(0), max_q, max_k, 0.0, False, seed, offset, scale=0.25,
    )
    ref_grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad, q, k, v, ref, ref_lse, 0.0, False, attn_mask=mask, scale=0.25
    )
    for a, e in zip((dq, dk, dv), ref_grads):
        assert a.stride() == e.stride()
        torch.testing.assert_close(a.cpu(), e)
    assert dmask.shape == mask.shape


@pytest.mark.parametrize("backend", [SDPBackend.OVERRIDEABLE, SDPBackend.MATH], ids=["overrideable", "math"])
def test_dropout_is_deterministic_for_a_seed_and_unbiased(baseline_memory, backend):
    # q = k = 0 attends uniformly, so with v = 1 every output element is the
    # kept fraction of its row scaled by 1 / (1 - p): 1 on average.
    q = torch.zeros(4, 4, 64, 16, device="emu")
    v = torch.ones(4, 4, 64, 16, device="emu")
    outs = []
    with sdpa_kernel([backend]):
        torch.manual_seed(3)
        names = op_names(lambda: outs.append(F.scaled_dot_product_attention(q, q, v, dropout_p=0.3)))
        torch.manual_seed(3)
        again = F.scaled_dot_product_attention(q, q, v, dropout_p=0.3)
        other = F.scaled_dot_product_attention(q, q, v, dropout_p=0.3)
    out = outs[0].cpu()
    assert (FUSED_OPS & names if backend == SDPBackend.OVERRIDEABLE else MATH_OP in names)
    assert torch.equal(out, again.cpu()) and not torch.equal(out, other.cpu())
    assert abs(out.mean().item() - 1.0) < 0.02
    kept = out[..., 0] * (1 - 0.3) * 64  # kept keys per row ~ Binomial(64, 0.7)
    assert abs(kept.mean().item() - 0.7 * 64) < 1.0
    assert abs(kept.var().item() - 64 * 0.7 * 0.3) < 4.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"mask": True}, {"enable_gqa": True}],
                         ids=["plain", "causal", "float_mask", "gqa"])
def test_fused_dropout_equals_math_with_the_same_dropout_mask(dtype, kwargs):
    """With value = identity the output is the dropped attention matrix
    P * Z / (1 - p), so the kernel's dropout mask Z can be read off it; math
    given that mask must agree in output and every gradient."""
    kwargs = dict(kwargs)
    p, s, hk = 0.3, 8, 2 if kwargs.get("enable_gqa") else 4
    q, k = rand(2, 4, 6, s, dtype=dtype), rand(2, hk, s, s, dtype=dtype, seed=1)
    v = torch.eye(s, dtype=dtype).expand(2, hk, s, s).contiguous()
    mask = rand(6, s, dtype=dtype, seed=2) if kwargs.pop("mask", False) else None
    grad = rand(2, 4, 6, s, dtype=dtype, seed=3)
    leaves = [t.to("emu").requires_grad_() for t in (q, k, v, *([mask] if mask is not None else []))]
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=leaves[3] if mask is not None else None,
                                             dropout_p=p, **kwargs)
    out.backward(grad.to("emu"))
    kept = out.detach().cpu() != 0
    assert 0.5 < kept[..., 0].float().mean() < 0.9  # first key: never causally masked
    ref_leaves = [t.clone().requires_grad_() for t in (q, k, v, *([mask] if mask is not None else []))]
    group = 4 // hk
    ref, _ = torch.ops.aten._scaled_dot_product_attention_math(
        ref_leaves[0], ref_leaves[1].repeat_interleave(group, 1), ref_leaves[2].repeat_interleave(group, 1),
        ref_leaves[3] if mask is not None else None, p, kwargs.get("is_causal", False), kept,
    )
    ref.backward(grad)
    tol = {} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), **tol)
    for a, e in zip(leaves, ref_leaves, strict=True):
        torch.testing.assert_close(a.grad.cpu(), e.grad, **tol)


def test_memory_returns_to_baseline_after_fused_forward_and_backward(baseline_memory):
    for name, make, kwargs in CASES:
        run("emu", *make(torch.float32), **kwargs)


def test_hugging_face_llama_trains_through_the_fused_kernel_with_cpu_losses(baseline_memory):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, attn_implementation="sdpa",
    )
    ids = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(1))
    pad = torch.ones_like(ids)
    pad[1, :5] = 0  # left padding: a boolean mask, not is_causal

    def train(device):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).to(device)
        assert model.config._attn_implementation == "sdpa"
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses = []
        for mask in (None, pad, None):
            mask = None if mask is None else mask.to(device)
            loss = model(input_ids=ids.to(device), attention_mask=mask, labels=ids.to(device)).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses

    expected = train("cpu")
    actual = []
    names = op_names(lambda: actual.extend(train("emu")))
    assert FUSED_OPS <= names and MATH_OP not in names
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
