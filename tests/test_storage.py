"""The emu storage subclass (EmuStorageImpl): every emu storage carries a
descriptor (id, allocation stream), whichever path created it, and keeps it
through views, set_, resize_, sharing and untyped_storage(); clones, copies
and torch.load make new emu storages with descriptors of their own."""

import copy
import io

import pytest
import torch

import torch_emu
from torch_emu import storage_desc

pytestmark = pytest.mark.usefixtures("baseline_memory")


def _roundtrip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


# --- what creates an emu storage ----------------------------------------------


@pytest.mark.launch_mode
@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.empty(3, 4, device="emu"),
        lambda: torch.empty_strided((3, 4), (1, 3), device="emu"),
        lambda: torch.empty(2, 3, 4, 5, device="emu", memory_format=torch.channels_last),
        lambda: torch.zeros(5, dtype=torch.int64, device="emu"),
        lambda: torch.randn(4, device="emu") * 2,  # a native kernel's output
        lambda: torch.erf(torch.randn(4, device="emu")),  # a fallback kernel's output
        lambda: torch.randn(4).to("emu"),  # host-to-device copy
        lambda: torch.UntypedStorage(16, device="emu"),  # PyTorch's make_storage_impl
        lambda: torch.randn(4, device="emu").untyped_storage().clone(),
    ],
    ids=["empty", "empty_strided", "channels_last", "zeros", "native", "fallback", "to", "UntypedStorage", "storage_clone"],
)
def test_every_emu_storage_has_a_descriptor(make):
    obj = make()
    desc = storage_desc(obj)
    assert isinstance(desc, torch_emu.StorageDesc)
    assert desc.id > 0
    assert desc.stream == torch.emu.current_stream()


def test_ids_are_unique_and_new_storages_get_new_ones():
    tensors = [torch.empty(8, device="emu") for _ in range(5)]
    ids = [storage_desc(t).id for t in tensors]
    assert len(set(ids)) == 5
    assert storage_desc(torch.empty(8, device="emu")).id > max(ids)


def test_empty_ops_match_cpu():
    for size, memory_format in [((2, 3, 4, 5), torch.channels_last), ((2, 3, 4, 5, 6), torch.channels_last_3d),
                                ((0, 3), torch.contiguous_format), ((), torch.contiguous_format)]:
        emu = torch.empty(size, device="emu", memory_format=memory_format)
        cpu = torch.empty(size, memory_format=memory_format)
        assert emu.shape == cpu.shape and emu.stride() == cpu.stride()
        assert emu.untyped_storage().nbytes() == cpu.untyped_storage().nbytes()
    emu = torch.empty_strided((3, 4), (1, 5), dtype=torch.float16, device="emu")
    cpu = torch.empty_strided((3, 4), (1, 5), dtype=torch.float16)
    assert emu.stride() == cpu.stride() and emu.untyped_storage().nbytes() == cpu.untyped_storage().nbytes()


@pytest.mark.launch_mode
def test_allocation_stream_is_the_current_stream_of_the_allocation():
    side = torch.emu.Stream()
    with torch.emu.stream(side):
        a = torch.randn(16, device="emu")
        b = torch.erf(a)  # allocated inside a kernel on `side`
    assert storage_desc(a).stream == side
    assert storage_desc(b).stream == side
    c = a.clone()  # on the default stream again
    assert storage_desc(c).stream == torch.emu.default_stream()
    torch.emu.synchronize()


@pytest.mark.launch_mode
def test_other_device():
    x = torch.ones(4, device="emu:1")
    desc = storage_desc(x)
    assert desc.stream.device == torch.device("emu:1")
    assert desc.stream == torch.emu.current_stream(1)
    y = x.to("emu:0")
    assert storage_desc(y).stream.device == torch.device("emu:0")
    assert storage_desc(y).id != desc.id


# --- what keeps a storage (and so its descriptor) -------------------------------


def test_views_and_sharing_keep_the_descriptor():
    x = torch.arange(24.0, device="emu").reshape(4, 6)
    desc = storage_desc(x)
    shared = [x[1:], x.t(), x.view(-1), x.reshape(2, 12), x[:, ::2], x.detach(), x.as_strided((2, 2), (1, 6)),
              torch.nn.Parameter(x), x.untyped_storage(), x._typed_storage()]
    for other in shared:
        assert storage_desc(other) == desc


@pytest.mark.launch_mode
def test_set_keeps_the_source_descriptor():
    src = torch.arange(10.0, device="emu")
    desc = storage_desc(src)
    a = torch.empty(0, device="emu").set_(src.untyped_storage(), 2, (2, 3), (3, 1))
    b = torch.empty(0, device="emu").set_(src)
    assert storage_desc(a) == desc and storage_desc(b) == desc
    assert torch.equal(a.cpu(), torch.arange(10.0).as_strided((2, 3), (3, 1), 2))
    # A view that needs more bytes grows the shared storage, as on CPU.
    small = torch.ones(2, device="emu")
    grown = torch.empty(0, device="emu").set_(small.untyped_storage(), 0, (4,), (1,))
    assert storage_desc(grown) == storage_desc(small) and small.untyped_storage().nbytes() == 16
    assert torch.equal(grown[:2].cpu(), torch.ones(2))
    empty = torch.empty(3, device="emu").set_()
    assert storage_desc(empty).stream is None  # owns no memory yet
    assert empty.shape == (0,)


@pytest.mark.launch_mode
@pytest.mark.parametrize("via", ["tensor", "storage"])
def test_resize_keeps_the_id_and_moves_to_the_new_allocation_stream(via):
    x = torch.arange(6.0, device="emu")
    view = x[2:]
    before = storage_desc(x)
    side = torch.emu.Stream()
    with torch.emu.stream(side):
        if via == "tensor":
            x.resize_(50)
        else:
            x.untyped_storage().resize_(200)
    torch.emu.synchronize()
    after = storage_desc(x)
    assert after.id == before.id
    assert after.stream == side  # the new memory was allocated on `side`
    assert storage_desc(view) == after  # the view shares the resized storage
    assert x.untyped_storage().nbytes() == 200
    assert torch.equal(x[:6].cpu(), torch.arange(6.0))
    x.untyped_storage().resize_(0)
    assert storage_desc(x) == (before.id, None)


@pytest.mark.launch_mode
def test_out_argument_grown_by_a_fallback_kernel():
    out = torch.empty(0, device="emu")
    desc = storage_desc(out)
    assert desc.stream is None
    x = torch.randn(5, device="emu")
    torch.erf(x, out=out)  # the CPU kernel resizes `out` inside the launch
    assert storage_desc(out).id == desc.id
    assert storage_desc(out).stream == torch.emu.current_stream()
    assert torch.allclose(out.cpu(), torch.erf(x.cpu()))


@pytest.mark.launch_mode
def test_copy_on_write_clone_follows_its_memory():
    # A lazy clone shares the block until written; writing gives it a block of
    # its own, allocated on the stream current at that moment. PyTorch swaps
    # the memory without telling the storage: the descriptor must still be right.
    x = torch.arange(4.0, device="emu")
    lazy = torch._lazy_clone(x)
    assert storage_desc(lazy).id != storage_desc(x).id
    assert storage_desc(lazy).stream == storage_desc(x).stream == torch.emu.default_stream()
    side = torch.emu.Stream()
    with torch.emu.stream(side):
        lazy.add_(1)
    torch.emu.synchronize()
    assert storage_desc(lazy).stream == side
    assert torch.equal(lazy.cpu(), torch.arange(1.0, 5.0))
    assert torch.equal(x.cpu(), torch.arange(4.0))


def test_copy_into_keeps_the_destination():
    dst = torch.zeros(4, device="emu")
    desc = storage_desc(dst)
    dst.copy_(torch.arange(4.0))
    dst.copy_(torch.ones(4, device="emu:1"))
    assert storage_desc(dst) == desc
    assert torch.equal(dst.cpu(), torch.ones(4))


# --- what makes a new storage ----------------------------------------------------


@pytest.mark.launch_mode
@pytest.mark.parametrize(
    "copy_fn",
    [
        lambda x: x.clone(),
        lambda x: x.to("emu:1"),
        lambda x: x.cpu().to("emu"),
        lambda x: x.contiguous(),
        lambda x: copy.deepcopy(x),
        lambda x: _roundtrip(x),
        lambda x: _roundtrip(x, map_location="emu:1"),
    ],
    ids=["clone", "to_other_device", "cpu_roundtrip", "contiguous", "deepcopy", "save_load", "load_emu1"],
)
def test_copies_are_new_emu_storages(copy_fn):
    x = torch.randn(3, 4, device="emu").t()  # non-contiguous: contiguous() copies
    y = copy_fn(x)
    assert y.device.type == "emu"
    desc = storage_desc(y)
    assert desc.id != storage_desc(x).id
    assert desc.stream == torch.emu.current_stream(y.device.index)
    assert torch.equal(y.cpu(), x.cpu())


def test_save_load_and_deepcopy_keep_sharing_between_tensors():
    base = torch.arange(12.0, device="emu")
    obj = {"base": base, "view": base[3:9].view(2, 3), "other": torch.ones(2, device="emu")}
    for restored in (_roundtrip(obj), copy.deepcopy(obj)):
        assert storage_desc(restored["view"]) == storage_desc(restored["base"])
        assert storage_desc(restored["other"]).id != storage_desc(restored["base"]).id
        assert storage_desc(restored["base"]).id != storage_desc(base).id
        assert torch.equal(restored["view"].cpu(), torch.arange(3.0, 9.0).view(2, 3))


@pytest.mark.launch_mode
@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_untyped_storage_save_load():
    storage = torch.arange(4, dtype=torch.uint8, device="emu").untyped_storage()
    loaded = _roundtrip(storage)  # comes back as a uint8 TypedStorage, as on CPU
    assert type(loaded) is torch.TypedStorage and loaded.device.type == "emu"
    assert storage_desc(loaded).id != storage_desc(storage).id
    assert storage_desc(loaded).stream == torch.emu.current_stream()
    assert loaded.tolist() == [0, 1, 2, 3]


@pytest.mark.launch_mode
def test_storage_slice_wraps_existing_memory():
    storage = torch.arange(8, dtype=torch.uint8, device="emu").untyped_storage()
    part = storage[2:5]
    desc = storage_desc(part)
    assert desc.id != storage_desc(storage).id and desc.stream is None
    assert part.tolist() == [2, 3, 4]
    head = storage[0:3]  # starts the other storage's block: the block's stream
    assert storage_desc(head).id != storage_desc(storage).id
    assert storage_desc(head).stream == storage_desc(storage).stream


def test_storage_and_tensor_metadata_are_different_levels():
    x = torch.randn(4, 4, device="emu")
    torch_emu.set_format_tag(x, 7)
    view = x[1:]
    # The format tag belongs to the tensor object, the descriptor to the memory.
    assert torch_emu.get_format_tag(view) == 0
    assert storage_desc(view) == storage_desc(x)
    loaded = _roundtrip(x)
    assert torch_emu.get_format_tag(loaded) == 7  # serialized via BackendMeta hooks
    assert storage_desc(loaded).id != storage_desc(x).id  # a new allocation


# --- bad input ---------------------------------------------------------------


@pytest.mark.parametrize("obj", [3, "emu", None, [torch.ones(1)], torch.ones(1).numpy()])
def test_not_a_tensor_or_storage(obj):
    with pytest.raises(TypeError, match="storage_desc expects an emu tensor or storage"):
        storage_desc(obj)


@pytest.mark.parametrize(
    "obj",
    [torch.ones(2), torch.ones(2).untyped_storage(), torch.ones(2, device="meta")],
    ids=["cpu_tensor", "cpu_storage", "meta_tensor"],
)
def test_not_on_emu(obj):
    with pytest.raises(RuntimeError, match="expected the storage of an emu tensor, got one on (cpu|meta)"):
        storage_desc(obj)


@pytest.mark.launch_mode
def test_negative_size_and_pinned_emu_are_clear_errors():
    with pytest.raises(RuntimeError, match="Trying to create tensor with negative dimension -1"):
        torch.empty(2, -1, device="emu")
    with pytest.raises(RuntimeError, match="negative dimension"):
        torch.empty_strided((-1, 2), (2, 1), device="emu")
    with pytest.raises(RuntimeError, match="Only dense CPU tensors can be pinned"):
        torch.empty(2, device="emu", pin_memory=True)
    with pytest.raises(RuntimeError, match="unsupported memory format"):
        torch.empty(2, 3, device="emu", memory_format=torch.preserve_format)
    with pytest.raises(RuntimeError, match="Trying to resize storage that is not resizable"):
        torch.arange(8, dtype=torch.uint8, device="emu").untyped_storage()[2:5].resize_(10)


@pytest.mark.parametrize(
    "target, source",
    [("emu:0", "cpu"), ("cpu", "emu:0"), ("emu:0", "emu:1")],
    ids=["emu_tensor_cpu_storage", "cpu_tensor_emu_storage", "other_emu_device"],
)
def test_set_to_a_storage_on_another_device(target, source):
    storage = torch.ones(2, device=source).untyped_storage()
    with pytest.raises(RuntimeError, match=f'on device "{target}" to a storage on different device "{source}"'):
        torch.empty(0, device=target).set_(storage)


def test_storage_copy_of_another_size():
    with pytest.raises(RuntimeError, match="size does not match, self was 16 bytes but src was 8 bytes"):
        torch.ones(4, device="emu").untyped_storage().copy_(torch.ones(2).untyped_storage())


# LITERALINCLUDE START: TEST_LEGACY_STORAGE
@pytest.mark.parametrize("dtype", [torch.float, torch.double, torch.half, torch.bfloat16, torch.long, torch.int,
                                   torch.int16, torch.int8, torch.uint8, torch.bool, torch.cfloat, torch.cdouble])
def test_storage_type_is_what_pytorchs_tests_expect(dtype):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TypedStorage is deprecated
        expected = torch.empty(2, dtype=dtype).storage_type()  # torch.FloatStorage...
        assert torch.empty(2, dtype=dtype, device="emu").storage_type() is expected
        assert getattr(torch.emu, expected.__name__) is expected
        storage = torch.empty(2, dtype=dtype, device="emu:1").storage()
        assert storage.device == torch.device("emu:1") and storage.dtype == dtype
# LITERALINCLUDE END: TEST_LEGACY_STORAGE
