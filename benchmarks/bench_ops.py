"""Operator benchmark of torch-emu: the fixed cost of common small ops and the
training step of three small models, on an emu device vs the same on CPU.

    .venv/bin/python benchmarks/bench_ops.py [--quick] [--json PATH] [--profile]

Small ops run on 8×8 and 64×64 float32 tensors, so their time is almost all
per-op overhead (dispatch, kernel launch, allocation), back to back and each
followed by .item() (a test's assertion): target at most 1.1x CPU, 1.0x for
in-place ops, in the default launch mode (also run it under `taskset -c 0`:
one core, where kernels run at once). The
models (an MLP, a small CNN, a transformer encoder block) run forward,
backward and an Adam step with PyTorch's default (foreach) implementation on
both devices: target at most 1.1x CPU. --profile prints, per model, the aten
ops of one emu step with their self time, the measurement that chose which
ops got native kernels. Measurement as in bench_foundation.py.
"""

import copy
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_foundation import bench, finish, machine_info, no_sync, parse_args, row, sync_emu  # noqa: E402

OP_TARGET = 1.1
INPLACE_TARGET = 1.0
INPLACE = ("add_ in place", "copy_", "zero_", "_foreach_add_ (4 tensors)")
MODEL_TARGET = 1.1


SIZES = (8, 64)  # n×n float32


def small_ops(n: int) -> dict:
    """name -> function of a device returning the op to time on that device
    (on n×n float32 tensors)."""
    def make(fn, *shapes, **kw):
        def on(device):
            g = torch.Generator().manual_seed(0)
            args = [torch.randn(s, generator=g).to(device) for s in shapes]
            return lambda: fn(*args, **kw)
        return on

    def indexed(fn):
        def on(device):
            x = torch.randn(8 * n, n).to(device)
            idx = torch.randint(0, 8 * n, (n,), generator=torch.Generator().manual_seed(0)).to(device)
            return lambda: fn(x, idx)
        return on

    def foreach(device):
        ps = [torch.randn(n, n).to(device) for _ in range(4)]
        gs = [torch.randn(n, n).to(device) for _ in range(4)]
        return lambda: torch._foreach_add_(ps, gs, alpha=0.1)

    sq = (n, n)
    return {
        "add": make(torch.add, sq, sq),
        "mul (tensor, scalar)": make(lambda a: a * 2.0, sq),
        "add_ in place": make(lambda a, b: a.add_(b), sq, sq),
        "relu": make(torch.relu, sq),
        "sum": make(torch.sum, sq),
        "mean over dim": make(lambda a: a.mean(1), sq),
        "softmax": make(lambda a: torch.softmax(a, -1), sq),
        "mm": make(torch.mm, sq, sq),
        "linear": make(F.linear, sq, sq, (n,)),
        "layer_norm": make(lambda a: F.layer_norm(a, (n,)), sq),
        "where": make(lambda a, b: torch.where(a > 0, a, b), sq, sq),
        "cat": make(lambda a, b: torch.cat([a, b]), sq, sq),
        "copy_": make(lambda a, b: a.copy_(b), sq, sq),
        "transpose, contiguous": make(lambda a: a.t().contiguous(), sq),
        "zero_": make(lambda a: a.zero_(), sq),
        "index_select": indexed(lambda x, i: x.index_select(0, i)),
        "x[i], integer indices": indexed(lambda x, i: x[i]),
        "embedding": indexed(lambda x, i: F.embedding(i, x)),
        "gather": indexed(lambda x, i: x.gather(0, i[:, None].expand(n, n))),
        "randn": lambda device: lambda: torch.randn(n, n, device=device),
        "_foreach_add_ (4 tensors)": foreach,
    }


def then_item(make):
    """The op followed by .item() of its first element: the pattern of every
    test assertion and of a loop that checks a loss."""
    def on(device):
        op = make(device)

        def run():
            out = op()
            (out[0] if isinstance(out, (list, tuple)) else out).reshape(-1)[0].item()
        return run
    return on


def bench_small_ops(quick: bool) -> list:
    rows = []
    for n in SIZES:
        for name, make in small_ops(n).items():
            for label, fn in ((f"{name}, {n}×{n}", make), (f"{name} then .item(), {n}×{n}", then_item(make))):
                t = bench(label, {"emu": (fn("emu"), sync_emu), "cpu": (fn("cpu"), no_sync)},
                          number=200 if quick else 2000, repeats=3 if quick else 7, warmup=50)
                rows.append(row(label, "µs/op", t["emu"] * 1e6, t["cpu"] * 1e6, t["emu"] / t["cpu"],
                                target=INPLACE_TARGET if name in INPLACE else OP_TARGET))
    return rows


class Block(torch.nn.Module):
    """Pre-norm transformer block: attention and MLP with residuals."""

    def __init__(self, dim=128, heads=4):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim))
        self.head = torch.nn.Linear(dim, 10)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.mlp(self.norm2(x))
        return self.head(x.mean(1))


def models() -> dict:
    """name -> (model, input batch, labels), built from a fixed seed."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                              torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    return {
        "MLP 512→512→512→10, batch 64": (mlp, torch.randn(64, 512), torch.randint(0, 10, (64,))),
        "CNN 2×(conv, batchnorm, relu), 32×32×3, batch 32":
            (cnn, torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))),
        "transformer block dim 128, 4 heads, 32 tokens, batch 16":
            (Block(), torch.randn(16, 32, 128), torch.randint(0, 10, (16,))),
    }


def train_step(device: str, model, x, y):
    net = copy.deepcopy(model).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x, y = x.to(device), y.to(device)

    def step():
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def bench_models(quick: bool) -> list:
    rows = []
    for name, (model, x, y) in models().items():
        steps = {device: train_step(device, model, x, y) for device in ("emu", "cpu")}
        t = bench(name, {"emu": (steps["emu"], sync_emu), "cpu": (steps["cpu"], no_sync)},
                  number=3 if quick else 15, repeats=3 if quick else 9, warmup=3)
        rows.append(row(f"train step, {name}, Adam", "ms/step", t["emu"] * 1e3, t["cpu"] * 1e3,
                        t["emu"] / t["cpu"], target=MODEL_TARGET))
    return rows


def profile_models() -> None:
    """Prints the aten ops of one emu training step of each model, by self time."""
    from torch.profiler import ProfilerActivity, profile
    for name, (model, x, y) in models().items():
        step = train_step("emu", model, x, y)
        for _ in range(3):
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                step()
        print(f"\n{name}\n" + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main() -> int:
    args = parse_args(__doc__.split("\n\n")[0], extra=[("--profile", "print per-op profiles")])
    if args.profile:
        profile_models()
        return 0
    machine = machine_info(args.quick)
    start = time.perf_counter()
    rows = bench_small_ops(args.quick) + bench_models(args.quick)
    worst = max((r for r in rows if r["unit"] == "µs/op"), key=lambda r: r["ratio"])
    notes = f"\nWorst small op: {worst['benchmark']} at {worst['ratio']:.2f}×."
    return finish(args, start, machine, rows, notes=notes, gap_before_warning=True)


if __name__ == "__main__":
    raise SystemExit(main())
