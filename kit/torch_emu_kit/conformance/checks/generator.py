"""Seeds reproduce, explicit generators are independent, RNG state round-trips, and samples have the right law."""

import torch

TIER = "generator"
CHAPTER = "generator"
ORDER = 40


def check_manual_seed_reproduces(dev):
    """torch.manual_seed and the device module's manual_seed give the same numbers again."""
    mod = torch.get_device_module(dev)
    for seed_fn in (torch.manual_seed, mod.manual_seed):
        seed_fn(1234)
        a = torch.randn(1000, device=dev)
        seed_fn(1234)
        b = torch.randn(1000, device=dev)
        assert torch.equal(a.cpu(), b.cpu()), f"{seed_fn.__module__}.manual_seed did not reproduce"


def check_explicit_generator(dev):
    """A torch.Generator of the device reproduces with its seed and does not move the default generator."""
    g = torch.Generator(device=dev)
    assert g.device.type == dev
    torch.manual_seed(7)
    expected = torch.rand(100, device=dev)
    torch.manual_seed(7)
    g.manual_seed(99)
    a = torch.rand(100, device=dev, generator=g)
    default_after = torch.rand(100, device=dev)
    g.manual_seed(99)
    assert torch.equal(a.cpu(), torch.rand(100, device=dev, generator=g).cpu())
    assert torch.equal(default_after.cpu(), expected.cpu()), "drawing from g moved the default generator"


def check_state_round_trip(dev):
    """get_rng_state / set_rng_state (device module and generator) replay the same numbers."""
    mod = torch.get_device_module(dev)
    state = mod.get_rng_state()
    a = torch.randn(100, device=dev)
    mod.set_rng_state(state)
    assert torch.equal(a.cpu(), torch.randn(100, device=dev).cpu())
    g = torch.Generator(device=dev)
    g.manual_seed(5)
    gstate = g.get_state()
    b = torch.randint(0, 1000, (100,), device=dev, generator=g)
    g.set_state(gstate)
    assert torch.equal(b.cpu(), torch.randint(0, 1000, (100,), device=dev, generator=g).cpu())


def check_fork_rng(dev):
    """torch.random.fork_rng(device_type=...) restores the device's RNG state on exit."""
    torch.manual_seed(3)
    expected = torch.rand(10, device=dev)
    torch.manual_seed(3)
    with torch.random.fork_rng(device_type=dev):
        torch.rand(1000, device=dev)
    assert torch.equal(torch.rand(10, device=dev).cpu(), expected.cpu())


def check_distributions(dev):
    """rand, randn, randint, bernoulli and normal_ samples have the right range, mean and spread."""
    torch.manual_seed(0)
    n = 200_000
    u = torch.rand(n, device=dev).cpu()
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    z = torch.randn(n, device=dev).cpu()
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
    k = torch.randint(3, 9, (n,), device=dev).cpu()
    assert k.min() == 3 and k.max() == 8
    b = torch.bernoulli(torch.full((n,), 0.3, device=dev)).cpu()
    assert abs(b.mean() - 0.3) < 0.01
    x = torch.empty(n, device=dev).normal_(5.0, 2.0).cpu()
    assert abs(x.mean() - 5) < 0.05 and abs(x.std() - 2) < 0.05


def check_dropout_rate(dev):
    """Dropout zeroes about p of the elements and scales the rest by 1/(1-p)."""
    torch.manual_seed(0)
    y = torch.nn.functional.dropout(torch.ones(100_000, device=dev), p=0.25).cpu()
    assert abs((y == 0).float().mean() - 0.25) < 0.01
    assert torch.allclose(y[y != 0], torch.tensor(1 / 0.75))


def check_wrong_generator_device(dev):
    """A CPU generator passed to a device sampler raises a Python exception."""
    try:
        torch.randn(3, device=dev, generator=torch.Generator())
    except RuntimeError:
        return
    raise AssertionError("torch.randn on the device accepted a CPU generator")
