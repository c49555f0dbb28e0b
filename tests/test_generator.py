"""The emu generator: same seed, same numbers as CPU; state save/restore."""

import pytest
import torch


def _draws(device, generator=None):
    kw = {"generator": generator} if generator is not None else {}
    return [
        torch.randn(5, 7, device=device, **kw).cpu(),
        torch.rand(100, device=device, **kw).cpu(),
        torch.randint(0, 1000, (50,), device=device, **kw).cpu(),
        torch.empty(64, device=device).normal_(2.0, 3.0, **kw).cpu(),
        torch.empty(64, device=device).bernoulli_(0.3, **kw).cpu(),
        torch.randperm(40, device=device, **kw).cpu(),
    ]


def test_same_seed_same_numbers_as_cpu():
    torch.manual_seed(1234)
    cpu = _draws("cpu")
    torch.manual_seed(1234)
    emu = _draws("emu")
    for a, b in zip(cpu, emu):
        assert torch.equal(a, b)


def test_explicit_generators_match_cpu():
    cpu = _draws("cpu", torch.Generator("cpu").manual_seed(7))
    emu = _draws("emu:1", torch.Generator("emu:1").manual_seed(7))
    for a, b in zip(cpu, emu):
        assert torch.equal(a, b)


def test_seed_functions():
    torch.emu.manual_seed(5)
    assert torch.emu.initial_seed() == 5
    torch.emu.manual_seed_all(9)
    with torch.emu.device(1):
        assert torch.emu.initial_seed() == 9
    torch.emu.seed()
    torch.emu.seed_all()
    assert torch.emu.initial_seed() != 9


def test_rng_state_roundtrip():
    torch.emu.manual_seed(3)
    state = torch.emu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    assert torch.equal(state, torch.Generator().manual_seed(3).get_state())  # CPU's format
    a = torch.randn(10, device="emu")
    torch.emu.set_rng_state(state)
    assert torch.equal(a, torch.randn(10, device="emu"))
    states = torch.emu.get_rng_state_all()
    assert len(states) == 2
    b = [torch.randn(3, device=f"emu:{i}").cpu() for i in range(2)]
    torch.emu.set_rng_state_all(states)
    assert all(torch.equal(b[i], torch.randn(3, device=f"emu:{i}").cpu()) for i in range(2))


def test_bad_generator_inputs():
    with pytest.raises(RuntimeError, match="generator"):
        torch.randn(3, device="emu", generator=torch.Generator("cpu"))
    with pytest.raises(TypeError):
        torch.emu.set_rng_state([1, 2, 3])
    with pytest.raises(RuntimeError):
        torch.emu.set_rng_state(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(RuntimeError, match="emu:4"):
        torch.Generator("emu:4")
