"""Asynchronous kernels: eager training steps and a generation loop, emu vs CPU.

    .venv/bin/python benchmarks/bench_async.py [--quick] [--json PATH]

Each workload (an MLP, a small CNN, a transformer block, an LSTM language
model, batch-1 generation with a small decoder, a tiny Hugging Face Llama and
GPT-2 when transformers is installed) runs in the four launch modes, each in its own
process: adaptive (the default with two cores or more: a small kernel onto an
idle stream runs at once, the others are queued), queued
(TORCH_EMU_LAUNCH_QUEUED=1: every queueable launch goes to the stream's worker), auto
(TORCH_EMU_LAUNCH_QUEUED=0: a launch onto a busy stream is queued, onto an
idle one it runs at once) and blocking (TORCH_EMU_LAUNCH_BLOCKING=1). The
main table is this machine's default mode. The details give emu/CPU time
ratios, each mode's emu and CPU steps timed alternately in that mode's
process (two processes on this machine differ by up to 1.5x in both); the share of the launches of one step that were queued, ran
at once, or had to wait; and, queued, when the host's call returned as a
share of the step (the rest of the step the device works alone; before it,
host and device overlap); and the peak device memory of a step in each mode
against blocking. Then the host time per queued launch (x.add_(1) on
8 floats, launched onto a stream held busy) against CPU running the same op.
Targets are reported, never enforced.
"""

import copy
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_ops  # noqa: E402
import bench_recurrent  # noqa: E402
from bench_foundation import (bench, finish, machine_info, no_sync, parse_args, row, run_in_child,  # noqa: E402
                             serve_child, sync_emu)

import torch_emu  # noqa: E402,F401

SMALL_OP_TARGET = 1.0  # the small-op-heavy workloads: emu faster than CPU
VOCAB, DIM, HEADS, LAYERS, PROMPT, NEW_TOKENS = 512, 128, 4, 2, 8, 24


class Decoder(torch.nn.Module):
    """A small decoder-only transformer as Hugging Face models write one:
    pre-norm blocks of causal scaled_dot_product_attention and a GELU MLP."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.blocks = torch.nn.ModuleList(
            torch.nn.ModuleDict({
                "norm1": torch.nn.LayerNorm(DIM), "qkv": torch.nn.Linear(DIM, 3 * DIM),
                "proj": torch.nn.Linear(DIM, DIM), "norm2": torch.nn.LayerNorm(DIM),
                "up": torch.nn.Linear(DIM, 4 * DIM), "down": torch.nn.Linear(4 * DIM, DIM),
            }) for _ in range(LAYERS))
        self.norm = torch.nn.LayerNorm(DIM)
        self.head = torch.nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        b, n, _ = x.shape
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["norm1"](x)).view(b, n, 3, HEADS, DIM // HEADS).unbind(2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True)
            x = x + blk["proj"](a.transpose(1, 2).reshape(b, n, DIM))
            x = x + blk["down"](F.gelu(blk["up"](blk["norm2"](x))))
        return self.head(self.norm(x))


def generate(device: str, model: torch.nn.Module):
    """Greedy batch-1 generation of NEW_TOKENS tokens (no KV cache): the next
    token stays on the device, so nothing waits until the caller does."""
    net = copy.deepcopy(model).to(device).eval()
    prompt = torch.arange(PROMPT, device=device)[None]

    def run():
        with torch.no_grad():
            tokens = prompt
            for _ in range(NEW_TOKENS):
                nxt = net(tokens)[:, -1].argmax(-1, keepdim=True)
                tokens = torch.cat([tokens, nxt], 1)
        return tokens
    return run


def hf_step(device: str, model_name: str):
    """A training step (AdamW) of a tiny Hugging Face model (transformers installed): Llama, or
    GPT-2 with its dropout (0.1, the default) on."""
    import transformers
    torch.manual_seed(0)
    if model_name == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, attn_implementation="sdpa"))
    else:
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=64, attn_implementation="sdpa"))
    model = model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(1)).to(device)

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    return step


def workloads() -> dict:
    """name -> (make(device) -> step function, target)."""
    out = {}
    for name, (model, x, y) in bench_ops.models().items():
        target = SMALL_OP_TARGET if "transformer" in name else None
        out[f"train step, {name}, Adam"] = (
            lambda device, m=model, x=x, y=y: bench_ops.train_step(device, m, x, y), target)
    tokens, targets = bench_recurrent.data()
    lstm = bench_recurrent.LanguageModel(torch.nn.LSTM)
    out["train step, LSTM LM (2×256, 64 tokens × 32), Adam"] = (
        lambda device: bench_recurrent.train_step(device, lstm, tokens, targets), None)
    torch.manual_seed(0)
    decoder = Decoder()
    out[f"generation, decoder {LAYERS}×{DIM}, batch 1, {PROMPT}+{NEW_TOKENS} tokens"] = (
        lambda device: generate(device, decoder), SMALL_OP_TARGET)
    try:
        import transformers  # noqa: F401
        out["train step, Hugging Face Llama (2×64, 32 tokens × 4), AdamW"] = (lambda d: hf_step(d, "llama"), None)
        out["train step, Hugging Face GPT-2 (2×64, 32 tokens × 4, dropout 0.1), AdamW"] = (
            lambda d: hf_step(d, "gpt2"), None)
    except ImportError:
        pass
    return out


def host_share(step) -> float:
    """When step() returns, as a share of the time until the device is done (median)."""
    shares = []
    for _ in range(5):
        start = time.perf_counter()
        step()
        issued = time.perf_counter()
        torch.emu.synchronize()
        shares.append((issued - start) / (time.perf_counter() - start))
    return sorted(shares)[len(shares) // 2]


def measure(quick: bool) -> dict:
    """name -> {emu, cpu (seconds per step), queued, at_once, waited (launches
    of one step), peak (device bytes allocated at most during one step), host
    (host_share)}."""
    results = {}
    for name, (make, _) in workloads().items():
        steps = {device: make(device) for device in ("emu", "cpu")}
        steps["emu"]()
        torch.emu.synchronize()
        torch.emu.reset_peak_memory_stats()
        before = torch_emu._C._launch_counts()
        steps["emu"]()
        torch.emu.synchronize()
        counts = [a - b for a, b in zip(torch_emu._C._launch_counts(), before)]
        peak = torch.emu.max_memory_allocated()
        t = bench(name, {"emu": (steps["emu"], sync_emu), "cpu": (steps["cpu"], no_sync)},
                  number=2 if quick else 8, repeats=3 if quick else 7, warmup=2)
        results[name] = dict(t, host=host_share(steps["emu"]), peak=peak,
                             **dict(zip(("queued", "at_once", "waited"), counts)))
    return results


def launch_overhead(quick: bool) -> dict:
    """Host seconds per queued x.add_(1) (8 floats) and per CPU x.add_(1)."""
    n = 500 if quick else 5000
    x, xc = torch.zeros(8, device="emu"), torch.zeros(8)
    clock_khz = torch.emu.get_device_properties().clock_rate or 1_000_000
    best = {"emu": float("inf"), "cpu": float("inf")}
    for _ in range(3 if quick else 7):
        torch.emu._sleep(clock_khz * 1000)  # one second: the launches below all queue
        start = time.perf_counter()
        for _ in range(n):
            x.add_(1)
        best["emu"] = min(best["emu"], (time.perf_counter() - start) / n)
        torch.emu.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            xc.add_(1)
        best["cpu"] = min(best["cpu"], (time.perf_counter() - start) / n)
    return best


MODES = {"adaptive": {}, "queued": {"TORCH_EMU_LAUNCH_QUEUED": "1"}, "auto": {"TORCH_EMU_LAUNCH_QUEUED": "0"},
         "blocking": {"TORCH_EMU_LAUNCH_BLOCKING": "1"}}


def in_child(mode: str, quick: bool) -> dict:
    """measure() in a process with launch mode `mode`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_EMU_LAUNCH_")}
    env.update(MODES[mode])
    return run_in_child(__file__, env, quick)


def share(r: dict) -> str:
    total = max(r["queued"] + r["at_once"] + r["waited"], 1)
    return f"{r['queued'] / total:.0%} / {r['at_once'] / total:.0%} / {r['waited'] / total:.0%}"


def main() -> int:
    if serve_child(measure):
        return 0
    args = parse_args(__doc__.split("\n\n")[0])
    machine = machine_info(args.quick)
    start = time.perf_counter()
    runs = {mode: in_child(mode, args.quick) for mode in MODES}
    default = torch_emu._C._launch_mode()
    rows, details = [], []
    for name, (_, target) in workloads().items():
        emu, cpu = runs[default][name]["emu"], runs[default][name]["cpu"]
        rows.append(row(name, "ms/step", emu * 1e3, cpu * 1e3, emu / cpu, target=target))
        ratios = " | ".join(f"{runs[m][name]['emu'] / runs[m][name]['cpu']:.2f}" for m in MODES)
        details.append(f"| {name} | {ratios} | {share(runs['adaptive'][name])} | {share(runs['queued'][name])} | "
                       f"{share(runs['auto'][name])} | {runs['queued'][name]['host']:.0%} |")
    # Queued kernels keep their inputs' blocks from reuse until they ran: peak memory against blocking.
    memory = "\n".join(f"| {name} | {runs['blocking'][name]['peak'] / 2**20:.2f} | " +
                       " | ".join(f"{runs[m][name]['peak'] / runs['blocking'][name]['peak']:.2f}"
                                  for m in ("adaptive", "queued", "auto")) + " |"
                       for name in workloads())
    cost = launch_overhead(args.quick)
    rows.append(row("launch overhead: x.add_(1), 8 floats, host time per queued kernel", "µs/op",
                    cost["emu"] * 1e6, cost["cpu"] * 1e6, cost["emu"] / cost["cpu"]))
    notes = ("\n| workload | emu/CPU adaptive | emu/CPU queued | emu/CPU auto | emu/CPU blocking | launches queued / "
             "at once / waited (adaptive) | the same (queued) | the same (auto) | host returns (queued) |\n"
             "|---|---|---|---|---|---|---|---|---|\n" +
             "\n".join(details) +
             f"\n\nThe main table is this machine's default ({default}) mode. Each ratio's CPU time is from the "
             "same process as its emu time. Waited launches: ops without a native kernel, ops whose kernel allocates its outputs "
             "(output sizes from data, or no meta function). Host returns: when the step's call "
             "returned, as a share of the step; until then host and device overlap.\n\n"
             "Peak device memory of one step (torch.emu.max_memory_allocated):\n\n"
             "| workload | blocking, MiB | adaptive / blocking | queued / blocking | auto / blocking |\n"
             "|---|---:|---:|---:|---:|\n" + memory)
    return finish(args, start, machine, rows, notes=notes, gap_before_warning=True)


if __name__ == "__main__":
    raise SystemExit(main())
