"""ONNX export of emu models: ``torch.onnx.export(..., dynamo=True)`` traces the
model with torch.export on emu, and onnxruntime (on the host) runs the file
with the emu model's results.

No allocator-baseline check here: onnxscript's rewriter keeps the IR of the
graphs it exported alive, with the model's tensors, on every device alike."""

import numpy as np
import pytest
import torch
from torch import nn

onnxruntime = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


class Block(nn.Module):
    """A pre-norm transformer block with a causal mask."""

    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device), 1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class LSTMTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 12, batch_first=True)
        self.out = nn.Linear(12, 3)

    def forward(self, x):
        return self.out(self.lstm(x)[0])


MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4)), (5, 8)),
    "cnn": (
        lambda: nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(128, 10)
        ),
        (2, 3, 8, 8),
    ),
    "transformer_block": (Block, (2, 6, 16)),
    "lstm": (LSTMTagger, (2, 7, 8)),
}


@pytest.mark.parametrize("name", MODELS)
def test_exported_emu_model_runs_in_onnxruntime(name, tmp_path):
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make().eval().to("emu")
    x = torch.randn(*shape, device="emu")
    with torch.no_grad():
        expected = model(x).cpu().numpy()
    path = tmp_path / f"{name}.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=True, verbose=False)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x.cpu().numpy()})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_export_with_inputs_on_two_devices_is_a_clear_error():
    model = nn.Linear(4, 4).eval().to("emu")
    with pytest.raises(Exception, match="same device"):
        torch.onnx.export(model, (torch.randn(2, 4),), dynamo=True, verbose=False)
