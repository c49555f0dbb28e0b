"""Recurrent networks on emu (csrc/aten/kernels/EmuRecurrent.cpp): nn.RNN, nn.LSTM,
nn.GRU and their cells against the same modules on CPU, forward and every
gradient (input, initial states, weights); the fused cell kernels on their
own; the oneDNN route of nn.LSTM; packed sequences, dropout, other dtypes,
autocast, torch.compile and the errors of bad inputs."""

import copy

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

EMU = torch.device("emu:0")
# Whether CPU's oneDNN takes bfloat16 on this processor (ATen asks ideep; on an x86 one without
# AVX-512 it does not, and CPU's bfloat16 LSTM steps through unfused cells).
ONEDNN_BFLOAT16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()


def flat(out):
    """The tensors of a module's output: tensors, tuples, PackedSequences."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, nn.utils.rnn.PackedSequence):
        return [pad_packed_sequence(out)[0]]
    return [t for o in out if o is not None for t in flat(o)]


def run(module, args, device, seed=None):
    """Forward and backward of a copy of ``module`` on ``device``: outputs,
    gradients of the floating-point tensor arguments and of the parameters,
    all on CPU. The loss weighs each output element differently."""
    module = copy.deepcopy(module).to(device)

    def to(a):
        if isinstance(a, torch.Tensor):
            a = a.detach().to(device)
            return a.requires_grad_() if a.is_floating_point() else a
        if isinstance(a, tuple):
            return tuple(to(x) for x in a)
        return a

    args = [to(a) for a in args]
    if seed is not None:
        torch.manual_seed(seed)
    outs = flat(module(*args))
    g = torch.Generator().manual_seed(0)
    loss = sum((o.float() * torch.randn(o.shape, generator=g).to(device)).sum() for o in outs)
    loss.backward()
    leaves = [t for a in args for t in (a if isinstance(a, tuple) else (a,))
              if isinstance(t, torch.Tensor) and t.requires_grad]
    assert all(o.device == torch.device(device) for o in outs)
    return {"outputs": [o.detach().cpu() for o in outs],
            "input grads": [t.grad.cpu() for t in leaves],
            "weight grads": {n: p.grad.cpu() for n, p in module.named_parameters()}}


def assert_same(emu, cpu, **tol):
    for key in ("outputs", "input grads"):
        assert len(emu[key]) == len(cpu[key]), key
        for i, (e, c) in enumerate(zip(emu[key], cpu[key])):
            torch.testing.assert_close(e, c, **tol, msg=lambda m: f"{key}[{i}]: {m}")
    assert emu["weight grads"].keys() == cpu["weight grads"].keys()
    for name, c in cpu["weight grads"].items():
        torch.testing.assert_close(emu["weight grads"][name], c, **tol, msg=lambda m: f"{name}.grad: {m}")


def initial_state(module, batch, dtype=torch.float32):
    """Random initial hidden state(s) of a sequence module, batched or not."""
    layers = module.num_layers * (2 if module.bidirectional else 1)
    batch_dims = () if batch is None else (batch,)
    h_size = module.proj_size or module.hidden_size if isinstance(module, nn.LSTM) else module.hidden_size
    h = torch.randn(layers, *batch_dims, h_size, dtype=dtype)
    if isinstance(module, nn.LSTM):
        return (h, torch.randn(layers, *batch_dims, module.hidden_size, dtype=dtype))
    return h


SEQUENCE_MODULES = {
    "rnn_tanh": lambda: nn.RNN(3, 5, num_layers=2),
    "rnn_relu_bidirectional_batch_first": lambda: nn.RNN(3, 5, 2, nonlinearity="relu", bidirectional=True,
                                                          batch_first=True),
    "lstm": lambda: nn.LSTM(3, 5, num_layers=2),
    "lstm_bidirectional_batch_first": lambda: nn.LSTM(3, 5, 2, bidirectional=True, batch_first=True),
    "lstm_proj_size_bidirectional": lambda: nn.LSTM(3, 5, 2, proj_size=2, bidirectional=True),
    "lstm_no_bias": lambda: nn.LSTM(3, 5, bias=False),
    "lstm_dropout_eval": lambda: nn.LSTM(3, 5, 3, dropout=0.5).eval(),
    "gru": lambda: nn.GRU(3, 5, num_layers=2),
    "gru_bidirectional_batch_first": lambda: nn.GRU(3, 5, 2, bidirectional=True, batch_first=True),
    "gru_no_bias_dropout_eval": lambda: nn.GRU(3, 5, 2, bias=False, dropout=0.5).eval(),
}


@pytest.mark.parametrize("with_state", [False, True], ids=["no_state", "state"])
@pytest.mark.parametrize("name", SEQUENCE_MODULES)
def test_sequence_module_matches_cpu(name, with_state):
    torch.manual_seed(0)
    module = SEQUENCE_MODULES[name]()
    x = torch.randn(3, 6, 3) if module.batch_first else torch.randn(6, 3, 3)
    args = [x, initial_state(module, 3)] if with_state else [x]
    assert_same(run(module, args, EMU), run(module, args, "cpu"))


@pytest.mark.parametrize("cls", [nn.RNN, nn.LSTM, nn.GRU])
def test_unbatched_sequence_matches_cpu(cls):
    torch.manual_seed(0)
    module = cls(3, 5, num_layers=2, bidirectional=True)
    args = [torch.randn(6, 3), initial_state(module, None)]
    assert_same(run(module, args, EMU), run(module, args, "cpu"))


CELLS = {
    "rnn_cell_tanh": lambda: nn.RNNCell(3, 5),
    "rnn_cell_relu": lambda: nn.RNNCell(3, 5, nonlinearity="relu"),
    "lstm_cell": lambda: nn.LSTMCell(3, 5),
    "lstm_cell_no_bias": lambda: nn.LSTMCell(3, 5, bias=False),
    "gru_cell": lambda: nn.GRUCell(3, 5),
    "gru_cell_no_bias": lambda: nn.GRUCell(3, 5, bias=False),
}


@pytest.mark.parametrize("batch", [4, None], ids=["batched", "unbatched"])
@pytest.mark.parametrize("with_state", [False, True], ids=["no_state", "state"])
@pytest.mark.parametrize("name", CELLS)
def test_cell_matches_cpu(name, with_state, batch):
    torch.manual_seed(0)
    cell = CELLS[name]()
    dims = () if batch is None else (batch,)
    args = [torch.randn(*dims, 3)]
    if with_state:
        h = torch.randn(*dims, 5)
        args.append((h, torch.randn(*dims, 5)) if isinstance(cell, nn.LSTMCell) else h)
    assert_same(run(cell, args, EMU), run(cell, args, "cpu"))


class Packed(nn.Module):
    """A sequence module run on the padded batch packed with ``lengths``."""

    def __init__(self, rnn, lengths, enforce_sorted=True):
        super().__init__()
        self.rnn, self.lengths, self.enforce_sorted = rnn, lengths, enforce_sorted

    def forward(self, x, state=None):
        return self.rnn(pack_padded_sequence(x, self.lengths, enforce_sorted=self.enforce_sorted), state)


@pytest.mark.parametrize("cls", [nn.RNN, nn.LSTM, nn.GRU])
@pytest.mark.parametrize("enforce_sorted", [True, False], ids=["sorted", "unsorted"])
def test_packed_sequence_matches_cpu(cls, enforce_sorted):
    torch.manual_seed(0)
    module = cls(3, 5, num_layers=2, bidirectional=True)
    packed = Packed(module, [6, 4, 4, 1] if enforce_sorted else [4, 6, 1, 4], enforce_sorted)
    args = [torch.randn(6, 4, 3), initial_state(module, 4)]
    assert_same(run(packed, args, EMU), run(packed, args, "cpu"))


@pytest.mark.parametrize("cls", [nn.RNN, nn.LSTM, nn.GRU])
def test_dropout_between_layers_matches_cpu_for_a_seed(cls):
    """Emu's generators give CPU's numbers for a seed, so training-mode
    dropout between layers draws the same masks on both."""
    torch.manual_seed(0)
    module = cls(3, 5, num_layers=3, dropout=0.5)
    args = [torch.randn(6, 3, 3)]
    emu, cpu = run(module, args, EMU, seed=7), run(module, args, "cpu", seed=7)
    assert_same(emu, cpu)
    assert not torch.equal(cpu["outputs"][0], run(module.eval(), args, "cpu")["outputs"][0])


@pytest.mark.parametrize("name", ["lstm_bidirectional_batch_first", "lstm_proj_size_bidirectional",
                                  "gru_bidirectional_batch_first", "rnn_tanh"])
def test_float64_matches_cpu(name):
    torch.manual_seed(0)
    module = SEQUENCE_MODULES[name]().double()
    x = torch.randn(3, 6, 3) if module.batch_first else torch.randn(6, 3, 3)
    args = [x.double(), initial_state(module, 3, torch.float64)]
    assert_same(run(module, args, EMU), run(module, args, "cpu"))


@pytest.mark.parametrize("name", ["lstm_cell", "gru_cell"])
def test_float64_cell_matches_cpu(name):
    torch.manual_seed(0)
    cell = CELLS[name]().double()
    args = [torch.randn(4, 3, dtype=torch.float64)]
    assert_same(run(cell, args, EMU), run(cell, args, "cpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lstm_on_onednn_equals_cpu_bit_for_bit(dtype):
    """Emu's aten::lstm runs CPU's oneDNN route: the same kernels on the same
    values, so the same bits, outputs and gradients."""
    torch.manual_seed(0)
    module = nn.LSTM(3, 5, num_layers=2, bidirectional=True, batch_first=True).to(dtype)
    args = [torch.randn(3, 6, 3).to(dtype), initial_state(module, 3, dtype)]
    if dtype == torch.bfloat16 and not ONEDNN_BFLOAT16:
        pytest.skip("CPU's oneDNN has no bfloat16 on this processor: "
                    "test_bfloat16_lstm_without_onednn_as_accurate_as_cpu")
    assert_same(run(module, args, EMU), run(module, args, "cpu"), rtol=0, atol=0)


@pytest.mark.skipif(ONEDNN_BFLOAT16, reason="CPU's oneDNN takes bfloat16: the bit-for-bit test runs")
def test_bfloat16_lstm_without_onednn_as_accurate_as_cpu():
    """Without oneDNN's bfloat16 neither device takes it: CPU rounds after each
    op of its cells, emu's fused cells once. Through two layers, both directions
    and six steps the roundings add up differently: a weight's gradient may be a
    few roundings from the float64 one on either device."""
    torch.manual_seed(0)
    module = nn.LSTM(3, 5, num_layers=2, bidirectional=True, batch_first=True).bfloat16()
    x, state = torch.randn(3, 6, 3).bfloat16(), initial_state(module, 3, torch.bfloat16)
    emu, cpu = run(module, [x, state], EMU), run(module, [x, state], "cpu")
    reference = run(module.double(), [x.double(), tuple(t.double() for t in state)], "cpu")
    assert_as_accurate(emu, cpu, reference, roundings=4)


def assert_as_accurate(emu, cpu, reference, roundings=1):
    """Each tensor of ``emu`` is within ``roundings`` bfloat16 roundings of the
    float64 ``reference`` at the tensor's scale, or at least as close as CPU's."""
    pairs = list(zip(emu["outputs"] + emu["input grads"], cpu["outputs"] + cpu["input grads"],
                     reference["outputs"] + reference["input grads"]))
    pairs += [(emu["weight grads"][n], cpu["weight grads"][n], r) for n, r in reference["weight grads"].items()]
    for e, c, r in pairs:
        error = lambda t: (t.double() - r).abs().max().item()  # noqa: E731
        assert error(e) <= max(2 * error(c), roundings * 2**-8 * r.abs().max().item()), (error(e), error(c))


@pytest.mark.parametrize("make", [lambda: nn.GRU(3, 5, 2), lambda: nn.LSTM(3, 5, proj_size=2),
                                  lambda: nn.LSTMCell(3, 5), lambda: nn.GRUCell(3, 5)],
                         ids=["gru", "lstm_proj_size", "lstm_cell", "gru_cell"])
def test_bfloat16_fused_cells_as_accurate_as_cpu(make):
    """In bfloat16 CPU rounds after every op of a cell, emu's fused cells
    once: the results differ by bfloat16 roundings. Both are compared with
    the float64 computation from the same bfloat16 values."""
    torch.manual_seed(0)
    module = make().bfloat16()
    x = torch.randn(4, 3) if isinstance(module, nn.RNNCellBase) else torch.randn(6, 4, 3)
    args = [x.bfloat16()]
    reference = run(module.double(), [x.bfloat16().double()], "cpu")
    module = module.bfloat16()
    assert_as_accurate(run(module, args, EMU), run(module, args, "cpu"), reference)


# --- the ops PyTorch reaches, and the kernels behind them --------------------


def ops_reached(fn):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    seen = set()
    with Log():
        fn()
    return seen


@pytest.mark.parametrize("make, x, expected", [
    (lambda: nn.LSTM(3, 5), torch.randn(4, 2, 3), {"mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"}),
    (lambda: nn.LSTM(3, 5, batch_first=True), torch.randn(2, 4, 3),
     {"mkldnn_rnn_layer", "mkldnn_rnn_layer_backward"}),
    (lambda: nn.LSTM(3, 5, proj_size=2), torch.randn(4, 2, 3),
     {"_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl"}),
    (lambda: nn.LSTMCell(3, 5), torch.randn(2, 3), {"_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl"}),
    (lambda: nn.GRU(3, 5), torch.randn(4, 2, 3), {"_thnn_fused_gru_cell", "_thnn_fused_gru_cell_backward"}),
    (lambda: nn.GRUCell(3, 5), torch.randn(2, 3), {"_thnn_fused_gru_cell", "_thnn_fused_gru_cell_backward"}),
], ids=["lstm", "lstm_batch_first", "lstm_proj_size", "lstm_cell", "gru", "gru_cell"])
def test_ops_reached(make, x, expected):
    module, x = make().to(EMU), x.to(EMU)

    def step():
        out = module(x)
        (out[0] if isinstance(out, tuple) else out).sum().backward()

    seen = ops_reached(step)
    assert expected <= seen
    assert not {"sigmoid", "sigmoid_", "tanh_"} & seen  # no unfused cell on emu
    fused = {"_thnn_fused_lstm_cell", "_thnn_fused_gru_cell"}
    assert not ("mkldnn_rnn_layer" in expected and fused & seen)


def test_kernels_are_emu_kernels():
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for op in ("_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl", "_thnn_fused_gru_cell",
               "_thnn_fused_gru_cell_backward", "lstm.input"):
        assert has(f"aten::{op}", "PrivateUse1"), op
        assert "EmuRecurrent.cpp" in torch._C._dispatch_dump(f"aten::{op}")
    assert has("aten::lstm.input", "AutogradPrivateUse1")


@pytest.mark.parametrize("cell, gates", [(torch.ops.aten._thnn_fused_lstm_cell, 4),
                                          (torch.ops.aten._thnn_fused_gru_cell, 3)])
def test_fused_cell_gradcheck(cell, gates):
    """The fused backward kernels against finite differences, in float64."""
    g = torch.Generator().manual_seed(0)
    make = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64).to(EMU).requires_grad_()  # noqa
    args = (make(2, gates * 3), make(2, gates * 3), make(2, 3), make(gates * 3), make(gates * 3))

    def fn(*a):
        return cell(*a)[:2] if gates == 4 else cell(*a)[0]

    assert torch.autograd.gradcheck(fn, args)
    assert torch.autograd.gradcheck(fn, args[:3])  # no biases


@pytest.mark.parametrize("output", [0, 1], ids=["hidden_only", "cell_only"])
def test_lstm_cell_backward_with_one_output_gradient(output):
    """A loss of one of the two states: the fused backward gets no gradient
    for the other."""

    class OneState(nn.LSTMCell):
        def forward(self, x, state):
            return super().forward(x, state)[output]

    torch.manual_seed(0)
    cell = OneState(3, 5)
    args = [torch.randn(4, 3), (torch.randn(4, 5), torch.randn(4, 5))]
    assert_same(run(cell, args, EMU), run(cell, args, "cpu"))


def test_inference_mode_and_no_grad_match_cpu():
    torch.manual_seed(0)
    module = nn.LSTM(3, 5, num_layers=2)
    x = torch.randn(6, 3, 3)
    emu = copy.deepcopy(module).to(EMU)
    expected = module(x)[0].detach()
    with torch.inference_mode():
        torch.testing.assert_close(emu(x.to(EMU))[0].cpu(), expected)
    with torch.no_grad():
        torch.testing.assert_close(emu(x.to(EMU))[0].cpu(), expected)


def test_second_device():
    if torch.emu.device_count() < 2:
        pytest.skip("needs two emu devices")
    torch.manual_seed(0)
    for make, x in ((lambda: nn.LSTM(3, 5), torch.randn(4, 2, 3)), (lambda: nn.GRUCell(3, 5), torch.randn(2, 3))):
        module = make()
        assert_same(run(module, [x], "emu:1"), run(module, [x], "cpu"))


def test_memory_returns_to_baseline(baseline_memory):
    """Every route (oneDNN, fused LSTM and GRU cells, packed sequences) frees
    what it allocated, workspaces included."""
    torch.manual_seed(0)
    x = torch.randn(5, 2, 3)
    for module in (nn.LSTM(3, 5, 2), nn.LSTM(3, 5, proj_size=2), nn.GRU(3, 5, bidirectional=True)):
        run(module, [x], EMU)
        run(Packed(module, [5, 3]), [x], EMU)
    run(nn.LSTMCell(3, 5), [x[0]], EMU)


# --- autocast ------------------------------------------------------------------


def test_autocast_lstm_matches_cpu_autocast():
    """Autocast casts nn.LSTM's op to bfloat16; it then takes oneDNN, as
    CPU's autocast does (which casts each oneDNN layer)."""
    if not ONEDNN_BFLOAT16:
        pytest.skip("CPU's own autocast LSTM fails on this processor: its oneDNN has no bfloat16 LSTM")
    torch.manual_seed(0)
    module = nn.LSTM(3, 5, num_layers=2, bidirectional=True)
    x = torch.randn(6, 3, 3)
    results = {}
    for device in ("cpu", "emu"):
        m, xi = copy.deepcopy(module).to(device), x.detach().to(device).requires_grad_()
        with torch.autocast(device, dtype=torch.bfloat16):
            out, (h, c) = m(xi)
        assert out.dtype == h.dtype == c.dtype == torch.bfloat16
        (out.float().square().sum() + h.float().sum()).backward()
        results[device] = [out.cpu(), h.cpu(), c.cpu(), xi.grad.cpu()] + [p.grad.cpu() for p in m.parameters()]
    for e, c in zip(results["emu"], results["cpu"]):
        torch.testing.assert_close(e, c)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("make", [lambda: nn.GRU(3, 5), lambda: nn.LSTM(3, 5), lambda: nn.LSTMCell(3, 5),
                                  lambda: nn.GRUCell(3, 5), lambda: nn.RNN(3, 5)],
                         ids=["gru", "lstm", "lstm_cell", "gru_cell", "rnn"])
def test_autocast_runs_in_the_lower_precision(make, dtype):
    """CUDA's policy, which emu's is: RNN cells, their fused kernels and (on
    CUDA, through cuDNN) whole sequences run in the autocast dtype. So an emu
    module under autocast computes what the module converted to that dtype
    computes (float16 LSTMs too, which CPU's oneDNN cannot train)."""
    torch.manual_seed(0)
    module = make().to(EMU)
    low = copy.deepcopy(module).to(dtype)
    x = torch.randn(2, 3) if isinstance(module, nn.RNNCellBase) else torch.randn(4, 2, 3)
    with torch.autocast("emu", dtype=dtype):
        out = flat(module(x.to(EMU)))[0]
    out.float().sum().backward()
    expected = flat(low(x.to(EMU, dtype)))[0]
    assert out.dtype == dtype
    torch.testing.assert_close(out, expected)
    expected.float().sum().backward()
    # Autocast casts a weight where a step uses it (a GRU's per-step matmuls
    # each cast the transposed weight), so its gradient sums the steps in
    # float32, the converted module's in the low dtype: a few roundings apart.
    eps = torch.finfo(dtype).eps
    for (name, p), q in zip(module.named_parameters(), low.parameters()):
        assert p.grad.dtype == torch.float32
        torch.testing.assert_close(p.grad, q.grad.float(), rtol=4 * eps, atol=4 * eps * q.grad.abs().max().item(),
                                   msg=lambda m: f"{name}: {m}")


# --- bad inputs ----------------------------------------------------------------------


@pytest.mark.parametrize("cls", [nn.RNN, nn.LSTM, nn.GRU])
def test_wrong_input_size(cls, baseline_memory):
    module = cls(3, 5).to(EMU)
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 3, got 4"):
        module(torch.randn(6, 2, 4, device=EMU))


@pytest.mark.parametrize("cls", [nn.RNN, nn.LSTM, nn.GRU])
def test_wrong_state_shape(cls, baseline_memory):
    module = cls(3, 5, num_layers=2).to(EMU)
    h = torch.randn(1, 2, 5, device=EMU)
    with pytest.raises(RuntimeError, match=r"Expected hidden(\[0\])? size \(2, 2, 5\), got \[1, 2, 5\]"):
        module(torch.randn(6, 2, 3, device=EMU), (h, h) if cls is nn.LSTM else h)


STATE_DEVICES = [("cpu", "emu:0", "cpu"), ("emu:1", "emu:0", "emu:1")]


@pytest.mark.parametrize("cls", [nn.RNN, nn.LSTM, nn.GRU])
@pytest.mark.parametrize("state_device, module_device, other", STATE_DEVICES, ids=["cpu_state", "emu1_state"])
def test_state_on_another_device(cls, state_device, module_device, other, baseline_memory):
    if "emu:1" in (state_device, module_device) and torch.emu.device_count() < 2:
        pytest.skip("needs two emu devices")
    module = cls(3, 5).to(module_device)
    x = torch.randn(6, 2, 3, device=module_device)
    h = torch.randn(1, 2, 5, device=state_device)
    with pytest.raises(RuntimeError, match=f"Input and hidden tensors are not at the same device, "
                                           f"found input tensor at {module_device} and hidden tensor at {other}"):
        module(x, (h, h) if cls is nn.LSTM else h)


@pytest.mark.parametrize("cls", [nn.RNNCell, nn.LSTMCell, nn.GRUCell])
@pytest.mark.parametrize("state_device", ["cpu", "emu:1"])
def test_cell_state_on_another_device(cls, state_device, baseline_memory):
    if state_device == "emu:1" and torch.emu.device_count() < 2:
        pytest.skip("needs two emu devices")
    cell = cls(3, 5).to(EMU)
    h = torch.randn(2, 5, device=state_device)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        cell(torch.randn(2, 3, device=EMU), (h, h) if cls is nn.LSTMCell else h)


def test_fused_cells_reject_bad_arguments(baseline_memory):
    e = lambda *shape, **kw: torch.randn(*shape, device=kw.get("device", EMU), dtype=kw.get("dtype"))  # noqa
    lstm, gru = torch.ops.aten._thnn_fused_lstm_cell, torch.ops.aten._thnn_fused_gru_cell
    with pytest.raises(RuntimeError, match=r"expected input_gates of shape \[batch, 4 \* hidden_size\]"):
        lstm(e(2, 10), e(2, 10), e(2, 3))
    with pytest.raises(RuntimeError, match="does not match input_gates"):
        lstm(e(2, 12), e(3, 12), e(2, 3))
    with pytest.raises(RuntimeError, match=r"expected the previous state of shape \[2, 3\], got \[2, 4\]"):
        gru(e(2, 9), e(2, 9), e(2, 4))
    with pytest.raises(RuntimeError, match="must be given together"):
        lstm(e(2, 12), e(2, 12), e(2, 3), e(12))
    with pytest.raises(RuntimeError, match=r"expected biases of shape \[9\]"):
        gru(e(2, 9), e(2, 9), e(2, 3), e(8), e(8))
    with pytest.raises(RuntimeError, match="expected all tensors to have dtype Float, got Double"):
        lstm(e(2, 12), e(2, 12), e(2, 3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="found at least two devices, emu:0 and cpu"):
        lstm(e(2, 12), e(2, 12), e(2, 3, device="cpu"))
    with pytest.raises(RuntimeError, match=r"workspace \[batch, 5 \* hidden\]"):
        torch.ops.aten._thnn_fused_gru_cell_backward(e(2, 3), e(2, 12), True)
    with pytest.raises(RuntimeError, match=r"workspace \[batch, 4 \* hidden\]"):
        torch.ops.aten._thnn_fused_lstm_cell_backward_impl(e(2, 3), None, e(2, 3), e(2, 3), e(2, 9), True)


def test_malformed_lstm_weights_are_an_error_not_a_crash(baseline_memory):
    """Arguments oneDNN cannot take go the generic way, which reports them."""
    x, h = torch.randn(4, 2, 3, device=EMU), torch.zeros(1, 2, 5, device=EMU)
    weights = [torch.randn(20, 4, device=EMU), torch.randn(20, 5, device=EMU)]  # input size 4, not 3
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.lstm(x, (h, h), weights, False, 1, 0.0, True, False, False)


# --- torch.compile ---------------------------------------------------------------


def test_compiled_model_matches_eager_cpu():
    """An LSTM layer (Dynamo runs RNN modules eagerly) feeding a GRUCell loop
    (traced and compiled, its fused cell an extern kernel) and a linear head."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm, self.cell, self.head = nn.LSTM(3, 5), nn.GRUCell(5, 4), nn.Linear(4, 2)

        def forward(self, x):
            h = None
            for step in self.lstm(x)[0]:
                h = self.cell(step, h)
            return self.head(h)

    torch.manual_seed(0)
    model, x = Net(), torch.randn(4, 2, 3)
    torch._dynamo.reset()
    try:
        with torch._inductor.config.patch(force_disable_caches=True):
            emu = copy.deepcopy(model).to(EMU)
            out = torch.compile(emu)(x.to(EMU))
            out.square().sum().backward()
    finally:
        torch._dynamo.reset()
    expected = model(x)
    expected.square().sum().backward()
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(emu.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
