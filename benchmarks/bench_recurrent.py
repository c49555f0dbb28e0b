"""Recurrent network benchmark of torch-emu: one training step of a small
language model on an emu device vs the same step on CPU.

    .venv/bin/python benchmarks/bench_recurrent.py [--quick] [--json PATH] [--profile]

The model: embedding (vocabulary 1000, 128 wide), a 2-layer LSTM of hidden
size 256, a linear decoder, cross-entropy over sequences of 64 tokens, batch
32, Adam. Target at most 1.1x CPU: there emu takes CPU's oneDNN route
(csrc/aten/kernels/EmuRecurrent.cpp). More rows: the LSTM stepping through emu's
fused cells (oneDNN disabled on emu only: what emu would do without its own
aten::lstm kernel), the same model with a GRU (fused GRU cells on emu, CPU's
chains of ops), and the LSTM with oneDNN disabled on both (fused LSTM cells
against CPU's chains of ops). --profile prints the aten ops of one emu LSTM
step by self time. Measurement as in bench_foundation.py.
"""

import copy
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_foundation import bench, finish, machine_info, no_sync, parse_args, row, sync_emu  # noqa: E402

TARGET = 1.1
VOCAB, EMBED, HIDDEN, SEQ, BATCH = 1000, 128, 256, 64, 32


class LanguageModel(torch.nn.Module):
    def __init__(self, rnn: type):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, EMBED)
        self.rnn = rnn(EMBED, HIDDEN, num_layers=2)
        self.decode = torch.nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens):
        return self.decode(self.rnn(self.embed(tokens))[0])


def train_step(device: str, model: torch.nn.Module, tokens, targets, onednn: bool = True):
    net = copy.deepcopy(model).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    tokens, targets = tokens.to(device), targets.to(device)

    def step():
        with torch.backends.mkldnn.flags(enabled=onednn):
            loss = F.cross_entropy(net(tokens).flatten(0, 1), targets.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()
    return step


def data():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, VOCAB, (SEQ, BATCH), generator=g), torch.randint(0, VOCAB, (SEQ, BATCH), generator=g)


def cases() -> dict:
    """name -> (rnn class, oneDNN enabled on emu, on CPU, target)."""
    return {
        "LSTM LM": (torch.nn.LSTM, True, True, TARGET),
        "LSTM LM, fused LSTM cells on emu, oneDNN on CPU": (torch.nn.LSTM, False, True, None),
        "GRU LM (fused GRU cells on emu)": (torch.nn.GRU, True, True, None),
        "LSTM LM, oneDNN disabled (fused LSTM cells on emu)": (torch.nn.LSTM, False, False, None),
    }


def bench_cases(quick: bool) -> list:
    tokens, targets = data()
    rows = []
    for name, (rnn, onednn_emu, onednn_cpu, target) in cases().items():
        torch.manual_seed(0)
        model = LanguageModel(rnn)
        steps = {device: train_step(device, model, tokens, targets, onednn)
                 for device, onednn in (("emu", onednn_emu), ("cpu", onednn_cpu))}
        t = bench(name, {"emu": (steps["emu"], sync_emu), "cpu": (steps["cpu"], no_sync)},
                  number=2 if quick else 3, repeats=3 if quick else 5, warmup=2)
        rows.append(row(f"train step, {name}, 2 layers × {HIDDEN}, {SEQ} tokens × {BATCH}, Adam", "ms/step",
                        t["emu"] * 1e3, t["cpu"] * 1e3, t["emu"] / t["cpu"], target=target))
    return rows


def profile() -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    torch.manual_seed(0)
    step = train_step("emu", LanguageModel(torch.nn.LSTM), *data())
    for _ in range(2):
        step()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main() -> int:
    args = parse_args(__doc__.split("\n\n")[0], extra=[("--profile", "print the ops of an emu LSTM step")])
    if args.profile:
        profile()
        return 0
    machine = machine_info(args.quick)
    start = time.perf_counter()
    rows = bench_cases(args.quick)
    return finish(args, start, machine, rows,
                  notes="\nThe first row takes oneDNN's LSTM layer on both devices; the second is what "
                        "emu would do without its aten::lstm kernel; the last two step through cells on "
                        "both, emu's fused ones against CPU's chains of ops.")


if __name__ == "__main__":
    raise SystemExit(main())
