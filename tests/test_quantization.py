"""Quantization on emu: quantized tensors (QTensorImpl on emu memory, the
QuantizedPrivateUse1 key), their copies and serialization, the quantized::
kernels, and the flows users run (quantize_dynamic, torchao quantize_, PT2E),
each compared with the same work on CPU."""

import copy
import io
import warnings

import pytest
import torch

import torch_emu.tools as tools

pytestmark = [
    pytest.mark.usefixtures("baseline_memory"),
    # PyTorch deprecates its quantized dtypes (qint8...); they still work.
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

QDTYPES = [torch.qint8, torch.quint8, torch.qint32]


def _zero_point(dtype):
    return 0 if dtype == torch.qint8 else 3


def _per_channel_params(n, dtype, device="cpu"):
    scales = torch.linspace(0.02, 0.2, n, dtype=torch.double)
    zero_points = torch.zeros(n, dtype=torch.long) if dtype == torch.qint8 else torch.arange(n) % 5
    return scales.to(device), zero_points.to(device)


def assert_same_qtensor(emu, cpu):
    """Same quantized tensor: device type, scheme, parameters, stored integers."""
    assert emu.device.type == "emu" and emu.is_quantized
    assert emu.dtype == cpu.dtype and emu.shape == cpu.shape and emu.qscheme() == cpu.qscheme()
    if cpu.qscheme() == torch.per_tensor_affine:
        assert (emu.q_scale(), emu.q_zero_point()) == (cpu.q_scale(), cpu.q_zero_point())
    else:
        assert emu.q_per_channel_axis() == cpu.q_per_channel_axis()
        for param_emu, param_cpu in [(emu.q_per_channel_scales(), cpu.q_per_channel_scales()),
                                     (emu.q_per_channel_zero_points(), cpu.q_per_channel_zero_points())]:
            assert param_emu.device == emu.device  # parameters live with the tensor, as on CUDA
            assert torch.equal(param_emu.cpu(), param_cpu)
    assert torch.equal(emu.int_repr().cpu(), cpu.int_repr())
    assert torch.equal(emu.dequantize().cpu(), cpu.dequantize())


# --- quantized tensors --------------------------------------------------------


@pytest.mark.parametrize("dtype", QDTYPES)
def test_quantize_per_tensor(dtype):
    torch.manual_seed(0)
    x = torch.randn(5, 7) * 3
    q = torch.quantize_per_tensor(x, 0.05, _zero_point(dtype), dtype)
    qe = torch.quantize_per_tensor(x.to("emu"), 0.05, _zero_point(dtype), dtype)
    assert_same_qtensor(qe, q)
    assert "QuantizedPrivateUse1" in str(torch._C._dispatch_keys(qe))
    assert qe.int_repr().dtype == q.int_repr().dtype
    # Tensor qparams (the 0-dim host scalars PT2E passes) and the _tensor overload.
    scale, zero_point = torch.tensor(0.05), torch.tensor(_zero_point(dtype))
    assert_same_qtensor(torch.quantize_per_tensor(x.to("emu"), scale, zero_point, dtype),
                        torch.quantize_per_tensor(x, scale, zero_point, dtype))


@pytest.mark.parametrize("dtype", QDTYPES)
@pytest.mark.parametrize("axis", [0, 1])
def test_quantize_per_channel(dtype, axis):
    torch.manual_seed(0)
    x = torch.randn(4, 6) * 2
    scales, zero_points = _per_channel_params(x.shape[axis], dtype)
    q = torch.quantize_per_channel(x, scales, zero_points, axis, dtype)
    qe = torch.quantize_per_channel(x.to("emu"), scales.to("emu"), zero_points.to("emu"), axis, dtype)
    assert_same_qtensor(qe, q)
    # float32 scales are converted to double, as on CPU
    qf = torch.quantize_per_channel(x.to("emu"), scales.float().to("emu"), zero_points.to("emu"), axis, dtype)
    assert torch.equal(qf.q_per_channel_scales().cpu(),
                       torch.quantize_per_channel(x, scales.float(), zero_points, axis, dtype).q_per_channel_scales())


def test_per_channel_float_qparams():
    torch.manual_seed(0)
    x = torch.randn(4, 6)
    scales, zero_points = torch.rand(4) / 10 + 0.01, torch.rand(4) * 3
    q = torch.quantize_per_channel(x, scales, zero_points, 0, torch.quint8)
    qe = torch.quantize_per_channel(x.to("emu"), scales.to("emu"), zero_points.to("emu"), 0, torch.quint8)
    assert qe.qscheme() == torch.per_channel_affine_float_qparams
    assert_same_qtensor(qe, q)
    assert_same_qtensor(q.to("emu"), q)


def test_quint4x2():
    torch.manual_seed(0)
    x = torch.rand(7) * 1.5
    q = torch.quantize_per_tensor(x, 0.1, 0, torch.quint4x2)
    qe = torch.quantize_per_tensor(x.to("emu"), 0.1, 0, torch.quint4x2)
    assert torch.equal(qe.int_repr().cpu(), q.int_repr())  # packed, two values a byte
    assert torch.equal(qe.dequantize().cpu(), q.dequantize())
    assert torch.equal(q.to("emu").dequantize().cpu(), q.dequantize())
    assert torch.equal(qe.cpu().int_repr(), q.int_repr())


@pytest.mark.parametrize("dtype", [torch.qint8, torch.quint8, torch.qint32])
def test_make_quantized_tensor_from_integers(dtype):
    ints = torch.randint(0, 100, (3, 4), dtype=torch.int32).to(c10_underlying(dtype))
    q = torch._make_per_tensor_quantized_tensor(ints, 0.5, 2)
    qe = torch._make_per_tensor_quantized_tensor(ints.to("emu"), 0.5, 2)
    assert_same_qtensor(qe, q)
    scales, zero_points = _per_channel_params(4, dtype)
    q = torch._make_per_channel_quantized_tensor(ints, scales, zero_points, 1)
    qe = torch._make_per_channel_quantized_tensor(ints.to("emu"), scales.to("emu"), zero_points.to("emu"), 1)
    assert_same_qtensor(qe, q)


def c10_underlying(dtype):
    return {torch.qint8: torch.int8, torch.quint8: torch.uint8, torch.qint32: torch.int32}[dtype]


def test_dynamic_quantize_deepcopy_equal_fill():
    torch.manual_seed(0)
    x = torch.randn(4, 6)
    xe = x.to("emu")
    assert_same_qtensor(torch.quantize_per_tensor_dynamic(xe, torch.quint8, False),
                        torch.quantize_per_tensor_dynamic(x, torch.quint8, False))
    q_c = torch.quantize_per_channel(x, *_per_channel_params(4, torch.qint8), 0, torch.qint8)
    qe_c = q_c.to("emu:1")
    deep = copy.deepcopy(qe_c)
    assert deep.device == torch.device("emu:1") and deep.untyped_storage().data_ptr() != qe_c.untyped_storage().data_ptr()
    assert_same_qtensor(deep, q_c)
    other = torch.quantize_per_channel(-x, *_per_channel_params(4, torch.qint8), 0, torch.qint8).to("emu:1")
    assert torch.equal(qe_c, deep) and not torch.equal(qe_c, other)
    q = torch.quantize_per_tensor(x, 0.1, 3, torch.quint8)
    qe = q.to("emu")
    q.fill_(1.0)
    qe.fill_(1.0)
    assert_same_qtensor(qe, q)
    assert torch.equal(torch.fake_quantize_per_tensor_affine(xe, 0.1, 0, -128, 127).cpu(),
                       torch.fake_quantize_per_tensor_affine(x, 0.1, 0, -128, 127))


def test_quantized_kernels_run_through_the_quantized_fallback():
    qe = torch.quantize_per_tensor(torch.randn(8, device="emu"), 0.1, 0, torch.qint8)
    with tools.fallback_report() as report:
        qe.int_repr()
        qe.dequantize()
        qe.q_scale()
    ops = dict((name, calls) for name, calls, _ in report.records)
    assert ops.get("aten::int_repr") == 1 and ops.get("aten::dequantize.self") == 1
    assert "aten::q_scale" not in ops  # metadata: PyTorch's device-generic function, no launch


# --- views, copies, devices ----------------------------------------------------


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("dtype", QDTYPES)
def test_moves_between_devices(dtype, per_channel):
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    if per_channel:
        q = torch.quantize_per_channel(x, *_per_channel_params(4, dtype), 0, dtype)
    else:
        q = torch.quantize_per_tensor(x, 0.03, _zero_point(dtype), dtype)
    e0 = q.to("emu:0")
    assert e0.device == torch.device("emu:0")
    assert_same_qtensor(e0, q)
    e1 = e0.to("emu:1")
    assert e1.device == torch.device("emu:1")
    assert_same_qtensor(e1, q)
    back = e1.to("emu:0").cpu()
    assert back.device.type == "cpu"
    assert torch.equal(back.int_repr(), q.int_repr()) and torch.equal(back.dequantize(), q.dequantize())
    if per_channel:
        assert back.q_per_channel_scales().device.type == "cpu"
    # copy_ into an existing quantized tensor takes the source's quantizer, as on CPU
    dst = torch._empty_affine_quantized(q.shape, scale=1.0, zero_point=0, dtype=dtype, device="emu:1") \
        if not per_channel else torch.empty_like(e1)
    dst.copy_(q)
    assert_same_qtensor(dst, q)


def test_views_clone_and_contiguous():
    torch.manual_seed(0)
    q = torch.quantize_per_tensor(torch.randn(4, 6), 0.05, 10, torch.quint8)
    qe = q.to("emu")
    for view in [lambda t: t.t(), lambda t: t[1:3, ::2], lambda t: t.reshape(2, 12), lambda t: t.unsqueeze(0),
                 lambda t: t.unsqueeze(1).squeeze(1), lambda t: t.view(24), lambda t: t.permute(1, 0)[2]]:
        assert_same_qtensor(view(qe).contiguous(), view(q).contiguous())
    assert_same_qtensor(qe.clone(), q.clone())
    assert qe.t().contiguous().untyped_storage().data_ptr() != qe.untyped_storage().data_ptr()
    assert qe[1].untyped_storage().data_ptr() == qe.untyped_storage().data_ptr()  # views share memory


def test_float_into_quantized_copy_quantizes():
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    q = torch._empty_affine_quantized((3, 4), scale=0.1, zero_point=5, dtype=torch.quint8)
    qe = torch._empty_affine_quantized((3, 4), scale=0.1, zero_point=5, dtype=torch.quint8, device="emu")
    q.copy_(x)
    qe.copy_(x.to("emu"))
    assert_same_qtensor(qe, q)
    qe.copy_(x)  # from the host
    assert_same_qtensor(qe, q)


@pytest.mark.parametrize("map_location", [None, "emu:1", "cpu"])
def test_save_load(map_location):
    torch.manual_seed(0)
    x = torch.randn(4, 6)
    q_t = torch.quantize_per_tensor(x, 0.05, 3, torch.quint8)
    q_c = torch.quantize_per_channel(x, *_per_channel_params(6, torch.qint8), 1, torch.qint8)
    q_i = torch.quantize_per_tensor(x, 0.001, 0, torch.qint32)
    buf = io.BytesIO()
    torch.save({"t": q_t.to("emu"), "c": q_c.to("emu"), "i": q_i.to("emu"), "view": q_t.to("emu")[1]}, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location=map_location)
    expected = torch.device(map_location or "emu:0")
    for key, cpu in [("t", q_t), ("c", q_c), ("i", q_i), ("view", q_t[1])]:
        assert loaded[key].device == expected
        if expected.type == "emu":
            assert_same_qtensor(loaded[key], cpu)
        else:
            assert torch.equal(loaded[key].int_repr(), cpu.int_repr()) and loaded[key].qscheme() == cpu.qscheme()


def test_load_cpu_checkpoint_onto_emu():
    q_c = torch.quantize_per_channel(torch.randn(3, 5), *_per_channel_params(3, torch.quint8), 0, torch.quint8)
    buf = io.BytesIO()
    torch.save(q_c, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location="emu:1")
    assert loaded.device == torch.device("emu:1")
    assert_same_qtensor(loaded, q_c)


# --- quantized:: kernels -----------------------------------------------------------


def test_quantized_elementwise_and_pooling_ops():
    torch.manual_seed(0)
    a = torch.quantize_per_tensor(torch.randn(2, 3, 6, 6), 0.05, 64, torch.quint8)
    b = torch.quantize_per_tensor(torch.randn(2, 3, 6, 6), 0.04, 60, torch.quint8)
    ae, be = a.to("emu"), b.to("emu")
    assert_same_qtensor(torch.ops.quantized.add(ae, be, 0.1, 10), torch.ops.quantized.add(a, b, 0.1, 10))
    assert_same_qtensor(torch.ops.quantized.mul(ae, be, 0.2, 5), torch.ops.quantized.mul(a, b, 0.2, 5))
    assert_same_qtensor(torch.relu(ae), torch.relu(a))
    assert_same_qtensor(torch.nn.functional.max_pool2d(ae, 2), torch.nn.functional.max_pool2d(a, 2))
    assert_same_qtensor(torch.nn.functional.adaptive_avg_pool2d(ae, 1), torch.nn.functional.adaptive_avg_pool2d(a, 1))
    assert_same_qtensor(torch.cat([ae, ae], 1), torch.cat([a, a], 1))
    assert_same_qtensor(ae.flatten(1), a.flatten(1))


def test_quantized_linear_and_conv():
    torch.manual_seed(0)
    w = torch.quantize_per_tensor(torch.randn(8, 16), 0.02, 0, torch.qint8)
    bias = torch.randn(8)
    x = torch.quantize_per_tensor(torch.randn(4, 16), 0.05, 64, torch.quint8)
    packed = torch.ops.quantized.linear_prepack(w, bias)
    packed_emu = torch.ops.quantized.linear_prepack(w.to("emu"), bias.to("emu"))
    assert_same_qtensor(torch.ops.quantized.linear(x.to("emu"), packed_emu, 0.1, 10),
                        torch.ops.quantized.linear(x, packed, 0.1, 10))
    xf = torch.randn(4, 16)
    y = torch.ops.quantized.linear_dynamic(xf.to("emu"), packed_emu)
    assert y.device.type == "emu" and torch.equal(y.cpu(), torch.ops.quantized.linear_dynamic(xf, packed))
    # The packed weight is a host object: its unpacked weight is a CPU tensor.
    w_unpacked, b_unpacked = torch.ops.quantized.linear_unpack(packed_emu)
    assert w_unpacked.device.type == "cpu" and torch.equal(w_unpacked.int_repr(), w.int_repr())

    cw = torch.quantize_per_channel(torch.randn(4, 3, 3, 3), *_per_channel_params(4, torch.qint8), 0, torch.qint8)
    cb = torch.randn(4)
    xc = torch.quantize_per_tensor(torch.randn(2, 3, 8, 8), 0.05, 64, torch.quint8)
    args = ([1, 1], [1, 1], [1, 1], 1)
    packed = torch.ops.quantized.conv2d_prepack(cw, cb, *args)
    packed_emu = torch.ops.quantized.conv2d_prepack(cw.to("emu"), cb.to("emu"), *args)
    assert_same_qtensor(torch.ops.quantized.conv2d(xc.to("emu"), packed_emu, 0.1, 10),
                        torch.ops.quantized.conv2d(xc, packed, 0.1, 10))
    assert_same_qtensor(torch.ops.quantized.conv2d_relu(xc.to("emu"), packed_emu, 0.1, 10),
                        torch.ops.quantized.conv2d_relu(xc, packed, 0.1, 10))


# --- flows -----------------------------------------------------------------------


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()


def _cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(8 * 3 * 3, 10),
    ).eval()


@pytest.mark.parametrize("dtype", [torch.qint8, torch.float16])
def test_quantize_dynamic_linear(dtype):
    from torch.ao.quantization import quantize_dynamic

    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(1))
    q_cpu = quantize_dynamic(_mlp(), {torch.nn.Linear}, dtype=dtype)
    q_emu = quantize_dynamic(_mlp().to("emu"), {torch.nn.Linear}, dtype=dtype)
    assert type(q_emu[0]).__name__ == "Linear" and type(q_emu[0]).__module__.startswith("torch.ao.nn.quantized")
    y = q_emu(x.to("emu"))
    assert y.device.type == "emu"
    assert torch.equal(y.cpu(), q_cpu(x))
    # The quantized weights match CPU's; the state dict round-trips.
    w_emu, w_cpu = q_emu[0].weight(), q_cpu[0].weight()
    assert torch.equal(w_emu.int_repr() if w_emu.is_quantized else w_emu, w_cpu.int_repr() if w_cpu.is_quantized else w_cpu)
    reloaded = quantize_dynamic(_mlp().to("emu"), {torch.nn.Linear}, dtype=dtype)
    reloaded.load_state_dict(q_emu.state_dict())
    assert torch.equal(reloaded(x.to("emu")).cpu(), q_cpu(x))


def test_quantize_dynamic_lstm():
    from torch.ao.quantization import quantize_dynamic

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.LSTM(8, 12, num_layers=2, batch_first=True)).eval()

    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))
    q_cpu = quantize_dynamic(model(), {torch.nn.LSTM}, dtype=torch.qint8)
    q_emu = quantize_dynamic(model().to("emu"), {torch.nn.LSTM}, dtype=torch.qint8)
    assert type(q_emu[0]).__module__.startswith("torch.ao.nn.quantized.dynamic")
    out_cpu, (h_cpu, c_cpu) = q_cpu(x)
    out_emu, (h_emu, c_emu) = q_emu(x.to("emu"))
    assert out_emu.device.type == "emu"
    for emu, cpu in [(out_emu, out_cpu), (h_emu, h_cpu), (c_emu, c_cpu)]:
        torch.testing.assert_close(emu.cpu(), cpu, rtol=0, atol=0)


def test_eager_static_quantization():
    from torch.ao.quantization import DeQuantStub, QuantStub, convert, get_default_qconfig, prepare

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = QuantStub(), DeQuantStub()
            self.conv, self.relu = torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()
            self.fc = torch.nn.Linear(4 * 6 * 6, 5)

        def forward(self, x):
            x = self.relu(self.conv(self.quant(x)))
            return self.dequant(self.fc(x.flatten(1)))

    def run(device):
        torch.manual_seed(0)
        model = Model().eval().to(device)
        model.qconfig = get_default_qconfig("x86")
        prepared = prepare(model)
        x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1)).to(device)
        prepared(x)  # calibrate
        return convert(prepared)(x)

    y = run("emu")
    assert y.device.type == "emu"
    assert torch.equal(y.cpu(), run("cpu"))


def _torchao_configs():
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig

    return [Int8WeightOnlyConfig(), Int8DynamicActivationInt8WeightConfig()]


@pytest.mark.parametrize("config_index", [0, 1], ids=["int8_weight_only", "int8_dynamic_activation_int8_weight"])
def test_torchao_quantize_(config_index):
    from torchao.quantization import quantize_

    config = _torchao_configs()[config_index]
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(1))
    m_cpu, m_emu = _mlp(), _mlp().to("emu")
    quantize_(m_cpu, config)
    quantize_(m_emu, config)
    assert type(m_emu[0].weight) is type(m_cpu[0].weight) and type(m_emu[0].weight) is not torch.nn.Parameter
    assert m_emu[0].weight.device.type == "emu"
    with torch.no_grad():
        y = m_emu(x.to("emu"))
        assert y.device.type == "emu"
        # Close, not equal: a small kernel on emu runs with one thread, and MKL's
        # matrix product of these shapes rounds differently with two.
        torch.testing.assert_close(y.cpu(), m_cpu(x))


def _pt2e(model, x):
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    quantizer = xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    for i in range(3):  # calibration
        prepared(x + i / 10)
    converted = convert_pt2e(prepared)
    with torch.no_grad():
        y = converted(x)
    targets = {str(n.target) for n in converted.graph.nodes if n.op == "call_function"}
    # torchao and torch.ao cache "the device of this module" with an unbounded
    # functools.cache keyed on the module, which keeps every model the flow saw
    # alive (on CPU too): empty them so that the memory check measures emu.
    import torchao.utils
    from torch.ao.quantization.fx import utils as fx_utils

    torchao.utils._assert_and_get_unique_device.cache_clear()
    fx_utils.assert_and_get_unique_device.cache_clear()
    return y, targets


def test_pt2e_x86_inductor_quantizer():
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    y_cpu, _ = _pt2e(_cnn(), x)
    y_emu, targets = _pt2e(_cnn().to("emu"), x.to("emu"))
    assert y_emu.device.type == "emu"
    assert torch.equal(y_emu.cpu(), y_cpu)
    assert any("quantize_per_tensor" in t for t in targets)  # really quantized


# --- int4 weight-only matmul in CUDA's layout (csrc/aten/kernels/EmuInt4Matmul.cpp) ----


def _int4_weight(b):
    from torch.testing._internal.common_quantization import _group_quantize_tensor

    return _group_quantize_tensor(b, n_bit=4, q_group_size=32)  # uint8 pairs off CPU, int32 on CPU


@pytest.mark.parametrize("m,k,n,inner_k_tiles", [(32, 64, 48, 2), (8, 256, 16, 4), (3, 256, 64, 8)])
def test_int4pack_mm_in_cudas_layout_matches_cpus_kernel(m, k, n, inner_k_tiles, baseline_memory):
    gen = torch.Generator().manual_seed(1)
    a = torch.rand(m, k, dtype=torch.bfloat16, generator=gen)
    b = torch.rand(k, n, dtype=torch.bfloat16, generator=gen)
    b_emu, scales_emu = _int4_weight(b.to("emu"))
    packed = torch._convert_weight_to_int4pack(b_emu, inner_k_tiles)
    assert packed.device.type == "emu" and packed.dtype == torch.int32
    assert packed.shape == (n // 8, k // (inner_k_tiles * 16), 32, inner_k_tiles // 2)  # CUDA's
    result = torch._weight_int4pack_mm(a.to("emu"), packed, 32, scales_emu)
    b_cpu, scales_cpu = _int4_weight(b)
    expected = torch._weight_int4pack_mm_for_cpu(a, torch._convert_weight_to_int4pack_for_cpu(b_cpu, inner_k_tiles), 32,
                                                 scales_cpu)
    assert torch.equal(result.cpu(), expected)
    assert ((result.cpu() - a @ b).abs() / (a @ b)).mean() < 0.05  # it is the matmul, quantized
    del b_emu, scales_emu, packed, result


def test_int4pack_mm_compiles():
    gen = torch.Generator().manual_seed(1)
    a = torch.rand(16, 64, dtype=torch.bfloat16, generator=gen)
    b = torch.rand(64, 32, dtype=torch.bfloat16, generator=gen)
    b_emu, scales = _int4_weight(b.to("emu"))

    @torch.compile(backend="inductor")
    def int4_mm(a, w, scales):
        return torch._weight_int4pack_mm(a, torch._convert_weight_to_int4pack(w, 2), 32, scales)

    eager = torch._weight_int4pack_mm(a.to("emu"), torch._convert_weight_to_int4pack(b_emu, 2), 32, scales)
    assert torch.equal(int4_mm(a.to("emu"), b_emu, scales).cpu(), eager.cpu())


def test_int4pack_bad_inputs(baseline_memory):
    w = torch.zeros(16, 32, dtype=torch.uint8, device="emu")
    with pytest.raises(RuntimeError, match="expected the weight as uint8"):
        torch._convert_weight_to_int4pack(w.int(), 2)
    with pytest.raises(RuntimeError, match="innerKTiles must be 2, 4 or 8"):
        torch._convert_weight_to_int4pack(w, 3)
    with pytest.raises(RuntimeError, match=r"n \(12\) must be a multiple of 8"):
        torch._convert_weight_to_int4pack(w[:12], 2)
    with pytest.raises(RuntimeError, match="must be a multiple of innerKTiles"):
        torch._convert_weight_to_int4pack(w, 8)
    packed = torch._convert_weight_to_int4pack(w, 2)
    scales = torch.ones(2, 16, 2, dtype=torch.bfloat16, device="emu")
    with pytest.raises(RuntimeError, match="expected A to be bfloat16"):
        torch._weight_int4pack_mm(torch.ones(2, 64, device="emu"), packed, 32, scales)
    with pytest.raises(RuntimeError, match=r"A must be \[m, 64\]"):
        torch._weight_int4pack_mm(torch.ones(2, 32, dtype=torch.bfloat16, device="emu"), packed, 32, scales)
    with pytest.raises(RuntimeError, match="4-D int32"):
        torch._weight_int4pack_mm(torch.ones(2, 64, dtype=torch.bfloat16, device="emu"), w, 32, scales)
    del w, packed, scales


# --- bad inputs ------------------------------------------------------------------


def test_bad_inputs_raise_clear_errors():
    x = torch.randn(4, 6, device="emu")
    scales, zero_points = _per_channel_params(4, torch.qint8, "emu")
    with pytest.raises(RuntimeError, match="Float is not supported"):
        torch.quantize_per_tensor(x, 0.1, 0, torch.float)
    with pytest.raises(RuntimeError, match="Channel axis out of range"):
        torch.quantize_per_channel(x, scales, zero_points, 2, torch.qint8)
    with pytest.raises(RuntimeError, match="same device"):
        torch.quantize_per_channel(x, scales, zero_points.cpu(), 0, torch.qint8)
    with pytest.raises(RuntimeError, match="same device"):
        torch.quantize_per_channel(x, scales.to("emu:1"), zero_points, 0, torch.qint8)
    qe = torch.quantize_per_tensor(x, 0.1, 0, torch.qint8)
    q_cpu = torch.quantize_per_tensor(torch.randn(4, 6), 0.1, 0, torch.qint8)
    with pytest.raises(RuntimeError, match="same device"):
        torch.ops.quantized.add(qe, q_cpu, 0.1, 0)
    with pytest.raises(RuntimeError, match="same device"):
        torch.ops.quantized.linear_prepack(qe, torch.randn(4))
    with pytest.raises(RuntimeError, match="please use dequantize"):
        torch.empty(4, 6, device="emu").copy_(qe)
    with pytest.raises(RuntimeError, match="same qscheme"):
        qe.copy_(torch.quantize_per_channel(torch.randn(4, 6), *_per_channel_params(4, torch.qint8), 0, torch.qint8))
    with pytest.raises(RuntimeError, match="QUInt8"):
        qe.copy_(torch.quantize_per_tensor(torch.randn(4, 6), 0.1, 0, torch.quint8))
    q4d = torch.quantize_per_tensor(torch.randn(2, 3, 4, 4, device="emu"), 0.1, 64, torch.quint8)
    with pytest.raises(RuntimeError, match="same device"):  # quantized emu with float CPU
        torch.quantized_batch_norm(q4d, torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(3), 1e-5, 0.1, 64)
    # Nothing broke: the device still quantizes.
    assert torch.equal(torch.quantize_per_tensor(x, 0.1, 0, torch.qint8).int_repr().cpu(),
                       torch.quantize_per_tensor(x.cpu(), 0.1, 0, torch.qint8).int_repr())
