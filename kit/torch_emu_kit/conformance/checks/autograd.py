"""Backward on the device gives CPU's gradients: single ops, a model, torch.autograd.grad and gradcheck."""

import copy

import torch

TIER = "autograd"
CHAPTER = "operators"
ORDER = 60


def check_op_gradients(dev):
    """Gradients of a chain of ops equal CPU's."""
    torch.manual_seed(0)
    c = torch.randn(6, 7, requires_grad=True)
    d = c.detach().to(dev).requires_grad_()
    for x in (c, d):
        ((x.sin() * x).softmax(-1) @ x.t()).logsumexp(0).sum().backward()
    torch.testing.assert_close(d.grad.cpu(), c.grad, atol=1e-5, rtol=1e-5)
    assert d.grad.device.type == dev


def check_model_gradients(dev):
    """A small conv + linear model's parameter gradients equal CPU's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 10), torch.nn.LogSoftmax(-1))
    other = copy.deepcopy(model).to(dev)
    x, y = torch.randn(5, 3, 8, 8), torch.randint(0, 10, (5,))
    torch.nn.functional.nll_loss(model(x), y).backward()
    torch.nn.functional.nll_loss(other(x.to(dev)), y.to(dev)).backward()
    for p, q in zip(model.parameters(), other.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, atol=1e-5, rtol=1e-4)


def check_autograd_grad_and_hooks(dev):
    """torch.autograd.grad with create_graph gives second derivatives; tensor hooks see device gradients."""
    x = torch.tensor([1.0, 2.0, 3.0], device=dev, requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.device.type))
    (g,) = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x)
    assert torch.equal(h.cpu(), torch.tensor([6.0, 12.0, 18.0])) and seen and all(s == dev for s in seen)


def check_gradcheck(dev):
    """torch.autograd.gradcheck passes in float64 for matmul, tanh and a reduction."""
    a = torch.randn(4, 3, dtype=torch.float64, device=dev, requires_grad=True)
    b = torch.randn(3, 2, dtype=torch.float64, device=dev, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: (a @ b).tanh().sum(0), (a, b))


def check_optimizer_step(dev):
    """An SGD-with-momentum and an Adam step change parameters exactly as on CPU."""
    for make in (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), lambda p: torch.optim.Adam(p, lr=0.01)):
        torch.manual_seed(0)
        cpu = torch.nn.Linear(8, 3)
        devm = copy.deepcopy(cpu).to(dev)
        x = torch.randn(16, 8)
        for model, inp in ((cpu, x), (devm, x.to(dev))):
            opt = make(model.parameters())
            for _ in range(3):
                opt.zero_grad()
                model(inp).pow(2).mean().backward()
                opt.step()
        for p, q in zip(cpu.parameters(), devm.parameters()):
            torch.testing.assert_close(q.detach().cpu(), p.detach(), atol=1e-5, rtol=1e-5)
