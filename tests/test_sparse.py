"""Sparse tensors (COO, CSR, CSC, BSR, BSC) on emu, checked against CPU.

A sparse emu tensor is a SparseTensorImpl / SparseCsrTensorImpl whose member
tensors live on emu; its ops run PyTorch's SparseCPU / SparseCsrCPU kernels on
the device memory (csrc/aten/kernels/EmuSparse.cpp, EmuSparseAlias.cpp).
"""

import itertools
import unittest

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

pytestmark = pytest.mark.filterwarnings("ignore:Sparse (CSR tensor support is in beta|invariant checks)")

COMPRESSED = [torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc]
LAYOUTS = [torch.sparse_coo] + COMPRESSED
BLOCKED = {torch.sparse_bsr, torch.sparse_bsc}


def dense(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g).to(dtype) if dtype.is_floating_point or dtype.is_complex else (
        torch.randint(-5, 5, shape, generator=g, dtype=dtype))
    mask = torch.rand(*shape, generator=g) < 0.5
    return x * mask


def to_layout(x, layout, dense_dim=None):
    blocksize = (2, 2) if layout in BLOCKED else None
    return x.to_sparse(layout=layout, blocksize=blocksize, dense_dim=dense_dim)


def members(t):
    if t.layout == torch.sparse_coo:
        return [t._indices(), t._values()]
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return [t.crow_indices(), t.col_indices(), t.values()]
    return [t.ccol_indices(), t.row_indices(), t.values()]


def assert_on(t, device="emu:0"):
    """`t` and every member tensor of it live on `device`."""
    assert t.device == torch.device(device)
    if t.layout != torch.strided:
        for m in members(t):
            assert m.device == torch.device(device) and m.layout == torch.strided


def assert_same(e, c, exact=True):
    """Emu result `e` is CPU result `c`: layout, metadata, members, values."""
    assert e.device.type == "emu"
    assert_on(e, e.device)
    assert e.layout == c.layout and e.shape == c.shape and e.dtype == c.dtype
    tol = dict(rtol=0, atol=0) if exact else {}
    if c.layout == torch.strided:
        torch.testing.assert_close(e.cpu(), c, equal_nan=True, **tol)
        return
    assert e._nnz() == c._nnz() and e.sparse_dim() == c.sparse_dim() and e.dense_dim() == c.dense_dim()
    if c.layout == torch.sparse_coo:
        assert e.is_coalesced() == c.is_coalesced()
    for em, cm in zip(members(e), members(c)):
        assert em.dtype == cm.dtype
        torch.testing.assert_close(em.cpu(), cm, equal_nan=True, **tol)


# --- construction, conversion, devices -------------------------------------------


def test_coo_constructor(baseline_memory):
    i = torch.tensor([[0, 1, 1, 2], [2, 0, 2, 1]])
    for dtype in [torch.float32, torch.float64, torch.int64, torch.complex64]:
        v = torch.arange(1, 5).to(dtype)
        c = torch.sparse_coo_tensor(i, v, (3, 3))
        e = torch.sparse_coo_tensor(i.to("emu"), v.to("emu"), (3, 3))
        assert_same(e, c)
        e = torch.sparse_coo_tensor(i, v, (3, 3), device="emu:1", check_invariants=True)
        assert_on(e, "emu:1")
        assert_same(e, c)
        assert e.is_sparse and not e.is_sparse_csr and e.layout == torch.sparse_coo


def test_compressed_constructors(baseline_memory):
    values = torch.tensor([1.0, 2.0, 3.0, 4.0])
    blocks = torch.arange(16.0).view(4, 2, 2)
    cases = [
        (torch.sparse_csr_tensor, values, (3, 3), torch.sparse_csr),
        (torch.sparse_csc_tensor, values, (3, 3), torch.sparse_csc),
        (torch.sparse_bsr_tensor, blocks, (6, 6), torch.sparse_bsr),
        (torch.sparse_bsc_tensor, blocks, (6, 6), torch.sparse_bsc),
    ]
    for (ctor, v, size, layout), index_dtype in itertools.product(cases, [torch.int32, torch.int64]):
        comp = torch.tensor([0, 2, 3, 4], dtype=index_dtype)
        plain = torch.tensor([0, 2, 1, 0], dtype=index_dtype)
        c = ctor(comp, plain, v, size)
        assert_same(ctor(comp, plain, v, size, device="emu", check_invariants=True), c)
        assert_same(ctor(comp.to("emu"), plain.to("emu"), v.to("emu"), size), c)
        e = torch.sparse_compressed_tensor(comp, plain, v, size, layout=layout, device="emu:1")
        assert_on(e, "emu:1")
        assert_same(e, c)
        assert e.is_sparse_csr == (layout == torch.sparse_csr)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_dense_to_sparse_and_back(layout, baseline_memory):
    named = {torch.sparse_coo: lambda t: t.to_sparse(), torch.sparse_csr: lambda t: t.to_sparse_csr(),
             torch.sparse_csc: lambda t: t.to_sparse_csc(), torch.sparse_bsr: lambda t: t.to_sparse_bsr((2, 2)),
             torch.sparse_bsc: lambda t: t.to_sparse_bsc((2, 2))}[layout]
    for dtype in [torch.float32, torch.int64, torch.bfloat16]:
        x = dense(4, 6, dtype=dtype)
        c = to_layout(x, layout)
        e = to_layout(x.to("emu"), layout)
        assert_same(e, c)
        assert_same(e.to_dense(), x)
        assert_same(named(x.to("emu")), named(x))


def test_hybrid_and_batched(baseline_memory):
    x = dense(2, 4, 6)
    assert_same(x.to("emu").to_sparse(2), x.to_sparse(2))  # hybrid COO: 2 sparse dims, 1 dense
    assert_same(x.to("emu").to_sparse_csr(), x.to_sparse_csr())  # batched CSR
    assert_same(x.to("emu").to_sparse_csr(dense_dim=1), x.to_sparse_csr(dense_dim=1))  # hybrid CSR
    assert_same(x.to("emu").to_sparse_bsc((2, 3)), x.to_sparse_bsc((2, 3)))


@pytest.mark.parametrize("src", LAYOUTS)
def test_sparse_to_sparse(src, baseline_memory):
    x = dense(4, 6)
    for dst in LAYOUTS:
        try:
            c = to_layout(to_layout(x, src), dst)
        except RuntimeError as exc:  # e.g. BSR -> CSR: not on CPU either
            with pytest.raises(RuntimeError, match=str(exc).split(":")[0]):
                to_layout(to_layout(x.to("emu"), src), dst)
            continue
        assert_same(to_layout(to_layout(x.to("emu"), src), dst), c)


def test_devices(baseline_memory):
    for layout in LAYOUTS:
        c = to_layout(dense(4, 6), layout)
        e0 = c.to("emu")
        assert_on(e0, "emu:0")
        e1 = e0.to("emu:1")  # peer copy of every member
        assert_on(e1, "emu:1")
        assert_same(e1, c)
        back = e1.cpu()
        assert back.device.type == "cpu" and back.layout == layout
        assert_same(e1.to("emu:0"), c)
        assert torch.equal(back.to_dense(), c.to_dense())
        assert_same(e1.clone(), c)
        assert e1.clone().device == torch.device("emu:1")


def test_copy_between_devices(baseline_memory):
    x = dense(4, 6)
    e = to_layout(torch.zeros(4, 6), torch.sparse_coo).to("emu:1")
    e.copy_(x.to_sparse())  # host -> emu:1: members copied, nnz changes
    assert_on(e, "emu:1")
    assert_same(e, x.to_sparse())
    e.copy_(x.to_sparse().to("emu:0") * 2)
    assert_same(e, x.to_sparse() * 2)
    csr = x.to_sparse_csr().to("emu") * 0
    csr.copy_(x.to_sparse_csr().to("emu:1"))
    assert_on(csr, "emu:0")
    assert_same(csr, x.to_sparse_csr())


def test_coalesce_and_accessors(baseline_memory):
    i = torch.tensor([[0, 2, 0, 1, 2], [1, 0, 1, 2, 0]])
    v = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    c = torch.sparse_coo_tensor(i, v, (3, 3))
    e = torch.sparse_coo_tensor(i, v, (3, 3), device="emu")
    assert not e.is_coalesced() and e._nnz() == 5
    assert_same(e, c)
    assert_same(e.coalesce(), c.coalesce())
    assert e.coalesce().is_coalesced() and e.coalesce()._nnz() == 3
    assert_same(e.coalesce().indices(), c.coalesce().indices())
    assert_same(e.coalesce().values(), c.coalesce().values())
    with pytest.raises(RuntimeError, match="uncoalesced"):
        e.indices()
    e._coalesced_(True)
    assert e.is_coalesced()
    x = dense(4, 6)
    for layout in COMPRESSED:
        ce, cc = to_layout(x.to("emu"), layout), to_layout(x, layout)
        get = (lambda t: (t.crow_indices(), t.col_indices())) if layout in (torch.sparse_csr, torch.sparse_bsr) else (
            lambda t: (t.ccol_indices(), t.row_indices()))
        for a, b in zip(get(ce) + (ce.values(),), get(cc) + (cc.values(),)):
            assert_same(a, b)
        assert (ce._nnz(), ce.sparse_dim(), ce.dense_dim()) == (cc._nnz(), cc.sparse_dim(), cc.dense_dim())


def test_properties_like_cuda(baseline_memory):
    s, d = dense(3, 4).to_sparse().to("emu"), torch.ones(3, 4, device="emu")
    csr = dense(3, 4).to_sparse_csr().to("emu")
    assert torch._has_compatible_shallow_copy_type(s, s.to("emu:1"))  # same kind, as CUDA
    assert not torch._has_compatible_shallow_copy_type(s, d)
    assert not torch._has_compatible_shallow_copy_type(s, s.cpu())
    assert torch._has_compatible_shallow_copy_type(csr, csr)
    assert not torch._has_compatible_shallow_copy_type(csr, s)
    # CSR across devices: no (a shallow copy would keep the old members).
    assert not torch._has_compatible_shallow_copy_type(csr, csr.cpu())
    assert not torch._has_compatible_shallow_copy_type(csr.cpu(), csr)
    assert not torch._has_compatible_shallow_copy_type(csr, csr.to("emu:1"))
    assert torch._has_compatible_shallow_copy_type(d, d.to("emu:1"))  # dense: unchanged
    assert s.type() == "torch.emu.sparse.FloatTensor"
    assert s.is_sparse and csr.is_sparse_csr and not d.is_sparse
    assert "device='emu:0'" in repr(s) and "layout=torch.sparse_csr" in repr(csr)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_module_with_sparse_parameter(layout, baseline_memory):
    x = dense(4, 6)
    m = torch.nn.Module()
    m.p = torch.nn.Parameter(to_layout(x, layout))
    for device in ["emu:0", "emu:1", "cpu"]:
        m.to(device)
        assert isinstance(m.p, torch.nn.Parameter) and m.p.requires_grad
        assert_on(m.p.detach(), device)
        assert torch.equal(m.p.detach().to_dense().cpu(), x)
    with pytest.raises(RuntimeError, match="incompatible tensor type"):
        m.p.data = to_layout(x, layout).to("emu")


# --- operations ------------------------------------------------------------------


def both(fn, *args):
    """fn on the CPU arguments and on their emu copies."""
    to_emu = lambda t: t.to("emu") if isinstance(t, torch.Tensor) else t  # noqa: E731
    return fn(*tree_map(to_emu, args)), fn(*args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sparse_dense_matmul(dtype, baseline_memory):
    a, b = dense(5, 7, dtype=dtype), torch.randn(7, 3, dtype=dtype)
    bias = torch.randn(5, 3, dtype=dtype)
    s = a.to_sparse()
    for fn in [torch.sparse.mm, torch.mm, torch.matmul, lambda x, y: x @ y]:
        assert_same(*both(fn, s, b), exact=False)
    assert_same(*both(lambda x, y, z: torch.addmm(z, x, y, beta=0.5, alpha=2.0), s, b, bias), exact=False)
    assert_same(*both(torch.sparse.addmm, bias, s, b), exact=False)
    assert_same(*both(torch.sparse.mm, s, a.t().to_sparse()), exact=False)  # sparse @ sparse -> sparse
    for layout in [torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr]:
        assert_same(*both(torch.mm, to_layout(dense(6, 6, dtype=dtype), layout), torch.randn(6, 3, dtype=dtype)),
                    exact=False)
    assert_same(*both(torch.mv, s, torch.randn(7, dtype=dtype)), exact=False)


def test_sampled_addmm_and_mm_reduce(baseline_memory):
    mask = dense(4, 5).to_sparse_csr()
    a, b = torch.randn(4, 3), torch.randn(3, 5)
    assert_same(*both(lambda m, x, y: torch.sparse.sampled_addmm(m, x, y, beta=0.5, alpha=2.0), mask, a, b),
                exact=False)
    for reduce in ["sum", "mean", "amax", "amin"]:
        assert_same(*both(lambda m, x: torch.sparse.mm(m, x, reduce), dense(4, 5).to_sparse_csr(), torch.randn(5, 3)))


def test_mm_reduce_backward(baseline_memory):
    # amax keeps the argmax only when an input requires grad: the kernel
    # must see requires_grad through the host aliases.
    for reduce in ["sum", "amax", "amin"]:
        grads = []
        for device in ["cpu", "emu"]:
            m = dense(4, 5).to_sparse_csr().to(device).requires_grad_()
            w = torch.randn(5, 3, generator=torch.Generator().manual_seed(1)).to(device).requires_grad_()
            torch.sparse.mm(m, w, reduce).sum().backward()
            grads.append((m.grad, w.grad))
        assert_same(grads[1][0], grads[0][0], exact=False)
        assert_same(grads[1][1], grads[0][1], exact=False)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_elementwise(layout, baseline_memory):
    x, y = dense(4, 6, seed=1), dense(4, 6, seed=2)
    sx, sy = to_layout(x, layout), to_layout(y, layout)
    d = torch.randn(4, 6)
    cases = [
        lambda a, b: a + b,
        lambda a, b: a * 2.5,
        lambda a, b: a * b,
        lambda a, b: torch.add(a, b, alpha=3),
        lambda a, b: -a,
        lambda a, b: a.abs().sqrt(),
        lambda a, b: torch.sum(a),
    ]
    if layout == torch.sparse_coo:
        cases += [
            lambda a, b: torch.sparse.sum(a),
            lambda a, b: torch.sparse.sum(a, dim=1),
            lambda a, b: torch.sparse.softmax(a, 1),
            lambda a, b: torch.sparse.log_softmax(a, 0),
            lambda a, b: a - b,
            lambda a, b: a.t().coalesce(),
            lambda a, b: torch.cat([a, b]),
            lambda a, b: a.index_select(1, torch.tensor([0, 3, 3]).to(a.device)),
            lambda a, b: a.sparse_mask(b.coalesce()),
        ]
    for fn in cases:
        assert_same(*both(fn, sx, sy), exact=False)
    assert_same(*both(lambda a, b: b + a, sx, d), exact=False)  # dense + sparse -> dense


def test_inplace(baseline_memory):
    x, y = dense(4, 6, seed=1), dense(4, 6, seed=2)
    for fn in [
        lambda a, b, d: a.add_(b),
        lambda a, b, d: a.mul_(3),
        lambda a, b, d: a.zero_(),
        lambda a, b, d: d.add_(a, alpha=2),  # dense += sparse (SGD's update)
        lambda a, b, d: a.sparse_resize_((5, 7), 2, 0),
        lambda a, b, d: torch.add(a, b, out=a),
    ]:
        e_args = (x.to_sparse().to("emu"), y.to_sparse().to("emu"), x.to("emu"))
        c_args = (x.to_sparse(), y.to_sparse(), x.clone())
        e, c = fn(*e_args), fn(*c_args)
        assert e is e_args[0] or e is e_args[2]
        assert_same(e, c)
    csr = x.to_sparse_csr().to("emu")
    csr.mul_(2)
    assert_same(csr, x.to_sparse_csr() * 2)


# --- sparse gradients --------------------------------------------------------------


def train(device, make_opt, steps=6, padding_idx=None):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(30, 5, sparse=True, padding_idx=padding_idx).to(device)
    head = torch.nn.Linear(5, 1).to(device)
    opts = make_opt(emb, head)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, 30, (8, 4), generator=g).to(device)
        target = torch.randn(8, 1, generator=g).to(device)
        loss = torch.nn.functional.mse_loss(head(emb(idx).mean(1)), target)
        for opt in opts:
            opt.zero_grad()
        loss.backward()
        assert emb.weight.grad.layout == torch.sparse_coo and emb.weight.grad.device == emb.weight.device
        for opt in opts:
            opt.step()
        losses.append(loss.item())
    return losses, emb.weight.detach().cpu(), head.weight.detach().cpu()


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda e, h: [torch.optim.SparseAdam(e.parameters(), lr=0.05), torch.optim.Adam(h.parameters(), lr=0.05)],
        lambda e, h: [torch.optim.SGD([*e.parameters(), *h.parameters()], lr=0.1)],
        lambda e, h: [torch.optim.SGD([*e.parameters(), *h.parameters()], lr=0.1, momentum=0.9)],
        lambda e, h: [torch.optim.Adagrad(e.parameters(), lr=0.1), torch.optim.SGD(h.parameters(), lr=0.1)],
    ],
    ids=["SparseAdam", "SGD", "SGD-momentum", "Adagrad"],
)
def test_embedding_sparse_training(make_opt, baseline_memory):
    cpu, emu = train("cpu", make_opt), train("emu", make_opt)
    assert cpu[0] == emu[0]  # the same losses, step after step
    torch.testing.assert_close(emu[1], cpu[1], rtol=0, atol=0)
    torch.testing.assert_close(emu[2], cpu[2], rtol=0, atol=0)


def test_sparse_grad_accumulates(baseline_memory):
    grads = []
    for device in ["cpu", "emu"]:
        emb = torch.nn.Embedding(10, 3, sparse=True, padding_idx=0).to(device)
        with torch.no_grad():
            emb.weight.copy_(torch.arange(30.0).view(10, 3).to(device))
        emb(torch.tensor([1, 0, 4]).to(device)).sum().backward()
        emb(torch.tensor([4, 9]).to(device)).pow(2).sum().backward()  # sparse + sparse in AccumulateGrad
        grads.append(emb.weight.grad)
    assert_same(grads[1].coalesce(), grads[0].coalesce())


# --- bad inputs --------------------------------------------------------------------------


def test_invalid_indices(baseline_memory):
    with pytest.raises(RuntimeError, match="size is inconsistent with indices"):
        torch.sparse_coo_tensor(torch.tensor([[5]]), torch.tensor([1.0]), (3,), device="emu", check_invariants=True)
    with pytest.raises(RuntimeError, match="crow_indices"):
        torch.sparse_csr_tensor(torch.tensor([0, 2, 1]), torch.tensor([0, 1]), torch.tensor([1.0, 2.0]), (2, 2),
                                device="emu", check_invariants=True)
    with pytest.raises(RuntimeError, match="col_indices"):
        torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 7]), torch.tensor([1.0, 2.0]), (2, 2),
                                device="emu", check_invariants=True)
    with pytest.raises(RuntimeError, match="indices and values must have same nnz"):
        torch.sparse_coo_tensor(torch.tensor([[0, 1]]), torch.tensor([1.0]), (3,), device="emu")


def test_wrong_layout(baseline_memory):
    s = dense(3, 4).to_sparse().to("emu")
    with pytest.raises(RuntimeError, match="expected sparse row compressed tensor layout"):
        s.crow_indices()
    with pytest.raises(NotImplementedError, match="sparse_sampled_addmm"):  # CSR only, as on CPU
        torch.sparse.sampled_addmm(s, torch.ones(3, 4, device="emu"), torch.ones(4, 4, device="emu"))
    with pytest.raises(NotImplementedError, match="cumsum.*SparseCPU"):  # no sparse kernel anywhere
        torch.cumsum(s, 0)
    with pytest.raises(RuntimeError, match=r"add\(sparse, dense\) is not supported"):
        s + torch.ones(3, 4, device="emu")
    with pytest.raises(RuntimeError, match="copy_.*between dense and sparse"):
        torch.ones(3, 4, device="emu").copy_(s)


def test_mixed_devices(baseline_memory):
    s = dense(3, 4).to_sparse().to("emu")
    csr = dense(3, 4).to_sparse_csr().to("emu")
    host = torch.ones(4, 2)
    for fn in [lambda: torch.sparse.mm(s, host), lambda: csr @ host, lambda: torch.sparse.mm(s.cpu(), host.to("emu")),
               lambda: s + s.cpu()]:
        with pytest.raises(RuntimeError, match="emu:0 and cpu"):
            fn()
    with pytest.raises(RuntimeError, match="emu:1 and emu:0|emu:0 and emu:1"):
        torch.sparse.mm(s, host.to("emu:1"))
    with pytest.raises(RuntimeError, match="emu:1 and emu:0|emu:0 and emu:1"):
        s.to("emu:1") + s
    with pytest.raises(RuntimeError, match="same device"):
        torch.sparse_coo_tensor(torch.tensor([[0]], device="emu"), torch.tensor([1.0], device="emu:1"), (3,))


# --- PyTorch's sparse OpInfos (last: importing op_db makes every gc.collect slow) ---

_SUPPORTS = {torch.sparse_coo: "supports_sparse", torch.sparse_csr: "supports_sparse_csr",
             torch.sparse_csc: "supports_sparse_csc", torch.sparse_bsr: "supports_sparse_bsr",
             torch.sparse_bsc: "supports_sparse_bsc"}


def _to_emu(x):
    return x.to("emu") if isinstance(x, torch.Tensor) else x


def _run_sample(op, sample, shape_only=False):
    """The sample on CPU and on emu: the same results, or the same error."""
    kwargs = dict(sample.kwargs)
    if "device" in kwargs:
        kwargs["device"] = "emu"

    def run_emu():
        return op(_to_emu(sample.input), *tree_map(_to_emu, sample.args), **tree_map(_to_emu, kwargs))

    try:
        c = op(sample.input, *sample.args, **sample.kwargs)
    except Exception as exc:
        with pytest.raises(type(exc)):
            run_emu()
        return
    for a, b in zip(tree_flatten(run_emu())[0], tree_flatten(c)[0]):
        if not isinstance(b, torch.Tensor):
            assert a == b
        elif shape_only:
            assert (a.shape, a.layout, a.device.type) == (b.shape, b.layout, "emu")
        else:
            assert_same(a, b, exact=False)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_opinfo_sparse_samples(layout, baseline_memory):
    """Every OpInfo with sparse sample inputs of `layout` (mul, sum, masked.*, zeros_like...)."""
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.opinfo.core import UnaryUfuncInfo

    ran = 0
    for op in op_db:
        if not getattr(op, _SUPPORTS[layout]) or isinstance(op, UnaryUfuncInfo):  # ufuncs: the next test
            continue
        for dtype in [torch.float32, torch.int64]:
            if not op.supports_dtype(dtype, "cpu"):
                continue
            try:
                samples = list(itertools.islice(op.sample_inputs_sparse(layout, "cpu", dtype), 4))
            except (NotImplementedError, unittest.SkipTest):  # the OpInfo has no samples for this layout
                continue
            for sample in samples:
                try:
                    _run_sample(op, sample, shape_only=op.name == "randn_like")
                except Exception as exc:
                    raise AssertionError(f"{op.name} {dtype}: {sample}") from exc
                ran += 1
    assert ran > 20


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_opinfo_sparse_unary_ufuncs(layout, baseline_memory):
    """PyTorch's sparse unary ufuncs on sparse versions of their dense samples."""
    from torch.testing._internal.common_methods_invocations import sparse_csr_unary_ufuncs, sparse_unary_ufuncs

    ops = sparse_unary_ufuncs if layout == torch.sparse_coo else sparse_csr_unary_ufuncs
    for op in ops:
        dtype = torch.float32 if op.supports_dtype(torch.float32, "cpu") else torch.int64
        samples = [s for s in op.sample_inputs("cpu", dtype) if s.input.dim() >= 2][:2]
        for sample in samples:
            sample.input = to_layout(sample.input, layout)
            try:
                _run_sample(op, sample)
            except Exception as exc:
                raise AssertionError(f"{op.name}: {sample}") from exc
    assert len(ops) > 30
