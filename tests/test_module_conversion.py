"""Module conversion keeps identity: module.to("emu") and friends move
parameters in place (``param.data = moved``) as they do for CUDA, so Parameter
objects survive, tied weights stay tied and an optimizer built before the move
keeps working (csrc/aten/kernels/EmuShallowCopy.cpp). Buffers are replaced by
Module._apply on every device, CUDA included; they are checked to move."""

import pytest
import torch
from torch import nn


class TiedLM(nn.Module):
    """A tiny language model whose output projection is its embedding."""

    def __init__(self, vocab=50, dim=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.norm(self.embed(tokens)))


def _identities(module):
    return {name: id(p) for name, p in module.named_parameters(remove_duplicate=False)}


@pytest.mark.parametrize(
    "convert",
    [
        lambda m: m.to("emu"),
        lambda m: m.emu(),
        lambda m: m.to("emu:1"),
        lambda m: m.to("emu").to(torch.float64),
        lambda m: m.to("emu").to("emu:1"),
        lambda m: m.to("emu").cpu(),
        lambda m: m.to("emu").half().float(),
        lambda m: m.to(device="emu", dtype=torch.bfloat16),
    ],
    ids=["to_emu", "emu()", "to_emu1", "emu_to_double", "emu0_to_emu1", "emu_to_cpu", "emu_half_float", "to_both"],
)
def test_conversion_keeps_parameter_objects(convert, baseline_memory):
    model = nn.Sequential(TiedLM(), nn.BatchNorm1d(50))
    before = _identities(model)
    convert(model)
    assert _identities(model) == before
    assert model[0].head.weight is model[0].embed.weight
    device = model[0].embed.weight.device
    assert all(b.device == device for b in model.buffers())
    del model


def test_shared_submodules_stay_shared(baseline_memory):
    shared = nn.Linear(4, 4)
    model = nn.ModuleDict({"a": nn.Sequential(shared, nn.ReLU()), "b": nn.Sequential(nn.Tanh(), shared)})
    model.to("emu")
    assert model["a"][0] is model["b"][1] and model["a"][0].weight.device.type == "emu"
    assert len(list(model.parameters())) == 2
    del model, shared


def test_gradients_move_with_their_parameters(baseline_memory):
    layer = nn.Linear(3, 2)
    layer(torch.randn(5, 3)).sum().backward()
    grad_cpu = layer.weight.grad.clone()
    grad_obj = layer.weight.grad
    layer.to("emu")
    assert layer.weight.grad is grad_obj and grad_obj.device.type == "emu"
    torch.testing.assert_close(grad_obj.cpu(), grad_cpu, rtol=0, atol=0)
    del layer, grad_obj


def test_optimizer_built_before_the_move_updates_the_model(baseline_memory):
    torch.manual_seed(0)
    model = TiedLM()
    reference = TiedLM()
    reference.load_state_dict(model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)  # before .to("emu")
    model.to("emu")
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    tokens = torch.randint(0, 50, (4, 8))
    for m, o, t in ((model, opt, tokens.to("emu")), (reference, ref_opt, tokens)):
        for _ in range(3):
            o.zero_grad()
            m(t).logsumexp(-1).mean().backward()
            o.step()
    torch.testing.assert_close(model.embed.weight.cpu(), reference.embed.weight)
    assert opt.state[model.embed.weight]["exp_avg"].device.type == "emu"
    del model, opt


def test_tensor_data_assignment_between_cpu_and_emu(baseline_memory):
    t = torch.zeros(3)
    t.data = torch.arange(3.0, device="emu")
    assert t.device.type == "emu" and t.tolist() == [0.0, 1.0, 2.0]
    t.data = torch.ones(2)
    assert t.device.type == "cpu" and t.tolist() == [1.0, 1.0]
    p = nn.Parameter(torch.zeros(2, device="emu:1"))
    p.data = torch.ones(2, device="emu")
    assert isinstance(p, nn.Parameter) and p.device == torch.device("emu:0")
    del t, p


def test_incompatible_data_assignment_is_a_clear_error(baseline_memory):
    t = torch.zeros(3, device="emu")
    with pytest.raises(RuntimeError, match="incompatible tensor type"):
        t.data = torch.empty(3, device="meta")
    with pytest.raises(RuntimeError, match="incompatible tensor type"):
        t.data = torch.zeros(3).to_sparse()
    assert t.device.type == "emu" and t.tolist() == [0.0, 0.0, 0.0]
    del t


def _gpt2_losses(device, steps=5):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2, tie_word_embeddings=True,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,  # CPU's and emu's generators are at different offsets
    )
    model = transformers.GPT2LMHeadModel(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # built on CPU, as users often do
    model.to(device)
    assert model.lm_head.weight is model.transformer.wte.weight
    tokens = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(1)).to(device)
    losses = []
    for _ in range(steps):
        loss = model(input_ids=tokens, labels=tokens).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_tied_gpt2_trains_like_cpu(baseline_memory):
    cpu = _gpt2_losses("cpu")
    emu = _gpt2_losses("emu")
    torch.testing.assert_close(emu, cpu, rtol=1e-5, atol=1e-5)
    assert cpu[-1] < cpu[0]
