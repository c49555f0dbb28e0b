"""``python -m torch_emu demo``: train a small classifier on an emu device and
on CPU from the same seed, then show that both learned the same thing."""

import time

import torch
from tqdm import tqdm

from . import _C, runtime


def _make_data(n: int = 2048, classes: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Interleaved spirals: a small task that needs a non-linear model."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    radius = torch.rand(n, generator=g)
    angle = labels * (2 * torch.pi / classes) + radius * 4.0 + 0.2 * torch.randn(n, generator=g)
    points = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    return points, labels


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(2, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 4),
    )


def train(device: str, steps: int, progress: bool) -> tuple[list[float], float]:
    """Trains from seed 0 on ``device``; returns the losses and seconds/step."""
    torch.manual_seed(0)
    model = _model().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    points, labels = _make_data()
    points, labels = points.to(device), labels.to(device)
    batch = 256
    # Batches come from a generator on the training device: emu's draws the
    # same numbers as CPU's for the same seed.
    batches = torch.Generator(device).manual_seed(1)
    losses = []
    bar = tqdm(range(steps), desc=f"training on {device}", disable=not progress, unit="step")
    start = time.perf_counter()
    for step in bar:
        index = torch.randint(0, points.shape[0], (batch,), device=device, generator=batches)
        loss = torch.nn.functional.cross_entropy(model(points[index]), labels[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == steps - 1:
            losses.append(loss.item())
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
    if device.startswith("emu"):
        torch.emu.synchronize(device)
    return losses, (time.perf_counter() - start) / steps


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def device_table() -> str:
    rows = [f"{'device':<8}{'name':<30}{'capacity':>12}{'free':>12}{'used':>12}"]
    for i in range(torch.emu.device_count()):
        free, total = torch.emu.mem_get_info(i)
        rows.append(
            f"{'emu:' + str(i):<8}{torch.emu.get_device_name(i):<30}{_gib(total):>12}{_gib(free):>12}"
            f"{_mib(total - free):>12}"
        )
    return "\n".join(rows)


def run(steps: int = 300, device: str = "emu:0") -> int:
    if not torch.emu.is_available():
        print("no emu devices: check TORCH_EMU_DEVICE_COUNT")
        return 1
    before = _C._launch_counts()
    emu_losses, emu_step = train(device, steps, progress=True)
    queued, at_once, waited = (after - b for after, b in zip(_C._launch_counts(), before))
    cpu_losses, cpu_step = train("cpu", steps, progress=False)
    max_diff = max(abs(a - b) for a, b in zip(emu_losses, cpu_losses))
    print(f"\nDevices (runtime: {runtime.active()})")
    print(device_table())
    print("\nLoss (every 10 steps), emu vs CPU from the same seed")
    print(f"  first {emu_losses[0]:.4f} vs {cpu_losses[0]:.4f}, final {emu_losses[-1]:.4f} vs {cpu_losses[-1]:.4f}")
    print(f"  largest difference: {max_diff:.2e} ({'match' if max_diff < 1e-4 else 'MISMATCH'})")
    stats = torch.emu.memory_stats(device)
    print(f"\nMemory on {device}")
    print(
        f"  allocated {stats['allocated_bytes.all.current'] / 2**20:.2f} MiB "
        f"(peak {stats['allocated_bytes.all.peak'] / 2**20:.2f} MiB), "
        f"reserved {stats['reserved_bytes.all.current'] / 2**20:.2f} MiB, "
        f"{stats['allocation.all.allocated']} allocations, {stats['num_ooms']} out-of-memory errors"
    )
    print("\nStep time")
    print(f"  emu {emu_step * 1e3:.3f} ms, CPU {cpu_step * 1e3:.3f} ms, ratio emu/CPU {emu_step / cpu_step:.2f}x")
    print(f"  kernel launches ({_C._launch_mode()} mode): {queued} queued, {at_once} ran at once on an idle "
          f"stream, {waited} waited for")
    return 0 if max_diff < 1e-4 else 1
