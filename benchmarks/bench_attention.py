"""Attention benchmark of torch-emu: F.scaled_dot_product_attention forward and
backward on an emu device (emu's chooser: the fused SDPBackend.OVERRIDEABLE
kernel) vs the same on CPU (CPU's own choice, its flash kernel).

    .venv/bin/python benchmarks/bench_attention.py [--quick] [--json PATH]

Both devices run CPU's flash-attention code, so 1.0× means the fused path adds
no overhead: target at most 1.1× CPU. Measurement as in bench_foundation.py.
"""

import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_foundation import bench, finish, machine_info, no_sync, parse_args, row, sync_emu  # noqa: E402

TARGET = 1.1
CASES = [  # (batch, heads, seq_len, head_dim, dtype, causal)
    (4, 8, 128, 64, torch.float32, False),
    (4, 8, 128, 64, torch.float32, True),
    (4, 8, 512, 64, torch.float32, False),
    (4, 8, 512, 64, torch.float32, True),
    (4, 8, 512, 64, torch.bfloat16, True),
]


def attention_step(device: str, b: int, h: int, seq: int, dim: int, dtype, causal: bool):
    """One forward and backward of SDPA on `device`, on (batch, seq, heads,
    dim) tensors viewed as (batch, heads, seq, dim), as transformers make them."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, seq, h, dim, generator=g).to(dtype).to(device).transpose(1, 2).requires_grad_()
               for _ in range(3))
    grad = torch.randn(b, h, seq, dim, generator=g).to(dtype).to(device)

    def step():
        for t in (q, k, v):
            t.grad = None
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(grad)
    return step, (q, k, v)


def main() -> int:
    args = parse_args(__doc__.split("\n\n")[0])
    machine = machine_info(args.quick)
    start = time.perf_counter()
    rows = []
    for b, h, seq, dim, dtype, causal in CASES[:2] if args.quick else CASES:
        steps = {d: attention_step(d, b, h, seq, dim, dtype, causal) for d in ("emu", "cpu")}
        chosen = {d: SDPBackend(torch._fused_sdp_choice(*steps[d][1], is_causal=causal)).name for d in steps}
        assert chosen == {"emu": "OVERRIDEABLE", "cpu": "FLASH_ATTENTION"}, chosen
        name = f"B={b} H={h} L={seq} D={dim} {str(dtype)[6:]}{' causal' if causal else ''}"
        t = bench(name, {"emu": (steps["emu"][0], sync_emu), "cpu": (steps["cpu"][0], no_sync)},
                  number=2, repeats=3 if args.quick else 5, warmup=1)
        rows.append(row(f"SDPA forward+backward, {name}", "ms/step", t["emu"] * 1e3, t["cpu"] * 1e3,
                        t["emu"] / t["cpu"], target=TARGET))
    notes = "\nemu: SDPBackend.OVERRIDEABLE (emu's fused kernel); CPU: FLASH_ATTENTION (CPU's default choice)."
    return finish(args, start, machine, rows, notes=notes)


if __name__ == "__main__":
    raise SystemExit(main())
