"""Datasets for the data-loading tests. They live in an importable module so
that DataLoader workers started with the ``spawn`` method can unpickle them.

Samples are a pure function of the index (no global random state), so every
worker, process and device sees exactly the same data.
"""

import torch
from torch.utils.data import Dataset

IN_FEATURES = 8
CLASSES = 3


class Regression(Dataset):
    """``n`` samples ``(x, y)``: ``x`` of ``IN_FEATURES`` floats, ``y`` a class."""

    def __init__(self, n: int = 64, seed: int = 0):
        self.n = n
        self.seed = seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if not 0 <= i < self.n:
            raise IndexError(i)
        g = torch.Generator().manual_seed(self.seed * 100_003 + i)
        x = torch.randn(IN_FEATURES, generator=g)
        y = torch.randint(0, CLASSES, (), generator=g)
        return x, y


class Dicts(Dataset):
    """Samples as dicts with a tensor, a nested tuple and a string."""

    def __init__(self, n: int = 8):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return {"x": torch.full((4,), float(i)), "pair": (torch.tensor(i), torch.ones(2) * i), "name": f"s{i}"}


class OnDevice(Dataset):
    """A (bad) dataset whose samples already live on an accelerator."""

    def __init__(self, device: str, n: int = 4):
        self.device = device
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.full((2,), float(i), device=self.device)
