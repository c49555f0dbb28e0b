"""Serialization of emu tensors: torch.save/torch.load with map_location,
storages, modules, optimizer state, the format tag kept in the tensor's
BackendMeta (save/load, clone, deepcopy), and safetensors."""

import copy
import warnings

import pytest
import torch

import torch_emu
from conftest import run_python
from _after_import import run_after_import

pytestmark = pytest.mark.usefixtures("baseline_memory")


def _roundtrip(obj, tmp_path, **load_kwargs):
    path = tmp_path / "ckpt.pt"
    torch.save(obj, path)
    return torch.load(path, **load_kwargs)


# --- torch.save / torch.load -------------------------------------------------


@pytest.mark.parametrize(
    "map_location, expected",
    [
        (None, "emu:0"),
        ("emu:1", "emu:1"),
        ({"emu:0": "emu:1"}, "emu:1"),
        (torch.device("emu", 1), "emu:1"),
        ("emu", "emu:0"),
        ("cpu", "cpu"),
        (lambda storage, location: storage, "cpu"),  # the pickled CPU copy
    ],
    ids=["none", "str", "dict", "device", "no-index", "cpu", "callable"],
)
def test_tensor_roundtrip(tmp_path, map_location, expected):
    x = torch.randn(5, 3, device="emu:0")
    y = _roundtrip(x, tmp_path, map_location=map_location)
    assert y.device == torch.device(expected)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert torch.equal(y.cpu(), x.cpu())


def test_tensor_from_emu1_stays_on_emu1(tmp_path):
    x = torch.arange(6.0, device="emu:1").reshape(2, 3)
    y = _roundtrip(x, tmp_path)
    assert y.device == torch.device("emu:1")
    assert torch.equal(y.cpu(), x.cpu())
    z = _roundtrip(x, tmp_path, map_location={"emu:1": "emu:0"})
    assert z.device == torch.device("emu:0")
    assert torch.equal(z.cpu(), x.cpu())


def test_views_keep_sharing_their_storage(tmp_path):
    base = torch.arange(10.0, device="emu")
    loaded = _roundtrip({"base": base, "view": base[2:7:2]}, tmp_path, map_location="emu:1")
    assert loaded["view"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    assert loaded["view"].tolist() == [2.0, 4.0, 6.0]
    loaded["base"][4] = -1.0
    assert loaded["view"][1].item() == -1.0


def test_noncontiguous_and_dtypes(tmp_path):
    tensors = {
        "t": torch.randn(4, 6, device="emu").t(),
        "half": torch.randn(3, device="emu").half(),
        "int": torch.arange(7, device="emu", dtype=torch.int64),
        "bool": torch.tensor([True, False], device="emu"),
        "complex": torch.randn(3, dtype=torch.complex64, device="emu"),
        "scalar": torch.tensor(3.5, device="emu"),
    }
    loaded = _roundtrip(tensors, tmp_path, map_location="emu:1")
    for name, x in tensors.items():
        assert loaded[name].device == torch.device("emu:1"), name
        assert loaded[name].stride() == x.stride(), name
        assert torch.equal(loaded[name].cpu(), x.cpu()), name


def test_storage_roundtrip(tmp_path):
    x = torch.arange(8, dtype=torch.int32, device="emu")
    storage = x.untyped_storage()
    for map_location, expected in [(None, "emu:0"), ("emu:1", "emu:1"), ("cpu", "cpu")]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "TypedStorage is deprecated"
            # torch.load returns a (uint8) TypedStorage for a saved UntypedStorage, as on CPU
            loaded = _roundtrip(storage, tmp_path, map_location=map_location)._untyped_storage
        assert isinstance(loaded, torch.UntypedStorage)
        assert loaded.device == torch.device(expected)
        assert loaded.nbytes() == storage.nbytes()
        back = torch.empty(0, dtype=torch.int32, device=loaded.device).set_(loaded)
        assert back.tolist() == list(range(8))


def _mlp(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to(device)


def test_module_state_dict(tmp_path):
    model = _mlp("emu:0")
    state = _roundtrip(model.state_dict(), tmp_path, map_location="emu:1")
    assert all(v.device == torch.device("emu:1") for v in state.values())
    other = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("emu:1")
    other.load_state_dict(state)
    x = torch.randn(3, 4)
    assert torch.allclose(other(x.to("emu:1")).cpu(), model(x.to("emu:0")).cpu())
    on_cpu = _roundtrip(model.state_dict(), tmp_path, map_location="cpu")
    assert all(v.device.type == "cpu" for v in on_cpu.values())


def test_whole_module(tmp_path):
    model = _mlp("emu:0")
    loaded = _roundtrip(model, tmp_path, weights_only=False)
    assert all(p.device == torch.device("emu:0") for p in loaded.parameters())
    moved = _roundtrip(model, tmp_path, weights_only=False, map_location="emu:1")
    assert all(p.device == torch.device("emu:1") for p in moved.parameters())
    x = torch.randn(2, 4)
    assert torch.allclose(moved(x.to("emu:1")).cpu(), model(x.to("emu:0")).cpu())


def test_optimizer_state_resumes_identically(tmp_path):
    x, target = torch.randn(16, 4), torch.randn(16, 2)

    def step(model, opt, device):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x.to(device)), target.to(device)).backward()
        opt.step()

    model = _mlp("emu:0")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(3):
        step(model, opt, "emu:0")
    path = tmp_path / "train.pt"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)

    ckpt = torch.load(path, map_location={"emu:0": "emu:1"})
    assert ckpt["opt"]["state"][0]["exp_avg"].device == torch.device("emu:1")
    resumed = _mlp("emu:1")
    resumed.load_state_dict(ckpt["model"])
    resumed_opt = torch.optim.Adam(resumed.parameters(), lr=1e-2)
    resumed_opt.load_state_dict(ckpt["opt"])
    del ckpt
    step(model, opt, "emu:0")
    step(resumed, resumed_opt, "emu:1")
    for a, b in zip(model.parameters(), resumed.parameters()):
        assert torch.allclose(a.cpu(), b.cpu())


def test_map_location_to_missing_device_is_a_clear_error(tmp_path):
    x = torch.ones(3, device="emu")
    for bad in ["emu:5", torch.device("emu", 5), {"emu:0": "emu:7"}]:
        with pytest.raises(RuntimeError, match=r"EMU device \d but torch\.emu\.device_count\(\) is 2"):
            _roundtrip(x, tmp_path, map_location=bad)


def test_checkpoint_from_emu1_in_a_one_device_process(tmp_path):
    x = torch.arange(4.0, device="emu:1")
    torch_emu.set_format_tag(x, 7)
    path = tmp_path / "emu1.pt"
    torch.save(x, path)
    code = f"""
        import torch, torch_emu
        assert torch.emu.device_count() == 1
        try:
            torch.load({str(path)!r})
        except RuntimeError as e:
            print("ERROR:", e)
        y = torch.load({str(path)!r}, map_location={{"emu:1": "emu:0"}})
        print("MAPPED:", y.device, y.tolist(), torch_emu.get_format_tag(y))
        z = torch.load({str(path)!r}, map_location="cpu")
        print("CPU:", z.device, z.tolist())
    """
    r = run_after_import(code, TORCH_EMU_DEVICE_COUNT="1")
    assert r.returncode == 0, r.stderr
    assert "ERROR: Attempting to deserialize object on EMU device 1 but torch.emu.device_count() is 1" in r.stdout
    assert "MAPPED: emu:0 [0.0, 1.0, 2.0, 3.0] 7" in r.stdout
    assert "CPU: cpu [0.0, 1.0, 2.0, 3.0]" in r.stdout


# --- backend metadata: the format tag -------------------------------------------


def test_format_tag_api():
    x = torch.zeros(4, device="emu")
    assert torch_emu.get_format_tag(x) == 0
    torch_emu.set_format_tag(x, 29)
    assert torch_emu.get_format_tag(x) == 29
    assert torch._C._get_tensor_metadata(x) == {"emu_format_29": True}
    torch_emu.set_format_tag(x, 2**40)
    assert torch_emu.get_format_tag(x) == 2**40
    torch_emu.set_format_tag(x, 0)  # removes it
    assert torch_emu.get_format_tag(x) == 0
    assert torch._C._get_tensor_metadata(x) == {}
    assert torch_emu.get_format_tag(torch.zeros(2)) == 0


def test_format_tag_bad_inputs():
    x = torch.zeros(2, device="emu")
    with pytest.raises(RuntimeError, match="only emu tensors carry a format tag, got a tensor on cpu"):
        torch_emu.set_format_tag(torch.zeros(2), 1)
    with pytest.raises(ValueError, match="must be >= 0"):
        torch_emu.set_format_tag(x, -3)
    with pytest.raises(TypeError, match="int tag"):
        torch_emu.set_format_tag(x, 1.5)
    with pytest.raises(TypeError, match="int tag"):
        torch_emu.set_format_tag(x, True)
    with pytest.raises(TypeError, match="torch.Tensor"):
        torch_emu.set_format_tag("x", 1)
    with pytest.raises(TypeError, match="torch.Tensor"):
        torch_emu.get_format_tag(None)
    assert torch_emu.get_format_tag(x) == 0


def test_format_tag_is_per_tensor_object():
    x = torch.zeros(4, device="emu")
    torch_emu.set_format_tag(x, 3)
    assert torch_emu.get_format_tag(x.detach()) == 3  # detach copies the TensorImpl's metadata
    assert torch_emu.get_format_tag(x[1:]) == 0  # a view is a new tensor
    assert torch_emu.get_format_tag(x + 1) == 0  # so is an op's result


def test_format_tag_survives_clone_and_deepcopy():
    x = torch.randn(3, 4, device="emu:1")
    torch_emu.set_format_tag(x, 5)
    for copied in [x.clone(), x.clone(memory_format=torch.contiguous_format), copy.deepcopy(x)]:
        assert copied.device == x.device
        assert copied.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        assert torch.equal(copied.cpu(), x.cpu())
        assert torch_emu.get_format_tag(copied) == 5
    # the copy's tag is its own
    c = x.clone()
    torch_emu.set_format_tag(c, 9)
    assert torch_emu.get_format_tag(x) == 5
    # untagged tensors stay untagged
    assert torch_emu.get_format_tag(torch.ones(2, device="emu").clone()) == 0
    assert torch_emu.get_format_tag(copy.deepcopy(torch.ones(2, device="emu"))) == 0
    # clone keeps autograd working
    w = torch.ones(3, device="emu", requires_grad=True)
    w.clone().sum().backward()
    assert w.grad.tolist() == [1.0, 1.0, 1.0]


def test_format_tag_on_parameters_and_modules(tmp_path):
    model = _mlp("emu")
    torch_emu.set_format_tag(model[0].weight, 11)
    assert torch_emu.get_format_tag(model.state_dict()["0.weight"]) == 11
    assert torch_emu.get_format_tag(copy.deepcopy(model)[0].weight) == 11
    state = _roundtrip(model.state_dict(), tmp_path, map_location="emu:1")
    assert torch_emu.get_format_tag(state["0.weight"]) == 11
    assert torch_emu.get_format_tag(state["0.bias"]) == 0
    whole = _roundtrip(model, tmp_path, weights_only=False)
    assert torch_emu.get_format_tag(whole[0].weight) == 11
    assert isinstance(whole[0].weight, torch.nn.Parameter)


@pytest.mark.parametrize("map_location", [None, "emu:1", {"emu:0": "emu:1"}])
def test_format_tag_survives_save_load(tmp_path, map_location):
    x = torch.randn(2, 3, device="emu:0")
    torch_emu.set_format_tag(x, 29)
    y = _roundtrip(x, tmp_path, map_location=map_location)
    assert torch_emu.get_format_tag(y) == 29
    y_old = _roundtrip(x, tmp_path, map_location=map_location, weights_only=False)
    assert torch_emu.get_format_tag(y_old) == 29


def test_format_tag_dropped_on_cpu(tmp_path):
    x = torch.randn(3, device="emu")
    torch_emu.set_format_tag(x, 4)
    y = _roundtrip(x, tmp_path, map_location="cpu")
    assert y.device.type == "cpu" and torch_emu.get_format_tag(y) == 0
    assert torch.equal(y, x.cpu())


def test_malformed_metadata_is_rejected():
    x = torch.zeros(2, device="emu")
    for bad in ["emu_format_", "emu_format_x", "emu_format_-2", "emu_format_0", "emu_format_3x"]:
        with pytest.raises(RuntimeError, match="Malformed emu tensor metadata"):
            torch._C._set_tensor_metadata(x, {bad: True})
    torch._C._set_tensor_metadata(x, {"emu_format_8": False, "other_backend_key": True})
    assert torch_emu.get_format_tag(x) == 0
    torch._C._set_tensor_metadata(x, {"emu_format_8": True})
    assert torch_emu.get_format_tag(x) == 8


# --- safetensors -----------------------------------------------------------------


def test_safetensors_state_dict(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    model = _mlp("emu:0")
    path = str(tmp_path / "model.safetensors")
    st.save_file(model.state_dict(), path)
    for device, expected in [("emu", "emu:0"), ("emu:1", "emu:1"), (torch.device("emu", 1), "emu:1"),
                             (1, "emu:1"), ("cpu", "cpu")]:
        loaded = st.load_file(path, device=device)
        assert set(loaded) == set(model.state_dict())
        for name, value in model.state_dict().items():
            assert loaded[name].device == torch.device(expected), (device, name)
            assert torch.equal(loaded[name].cpu(), value.cpu())
    with st.safe_open(path, framework="pt", device="emu:1") as f:
        assert f.get_tensor("0.weight").device == torch.device("emu:1")


def test_safetensors_save_and_load_model(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    model = _mlp("emu:0")
    path = str(tmp_path / "model.safetensors")
    st.save_model(model, path)
    other = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("emu:1")
    missing, unexpected = st.load_model(other, path, device="emu:1")
    assert not missing and not unexpected
    for a, b in zip(model.parameters(), other.parameters()):
        assert b.device == torch.device("emu:1")
        assert torch.equal(a.cpu(), b.cpu())
    # bytes API: save from emu, load on CPU
    loaded = st.load(st.save({"w": model[0].weight.detach()}))
    assert torch.equal(loaded["w"], model[0].weight.detach().cpu())


def test_safetensors_bad_device(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    path = str(tmp_path / "t.safetensors")
    st.save_file({"x": torch.ones(2, device="emu")}, path)
    with pytest.raises(RuntimeError, match=r"Cannot load safetensors onto emu:5: there are 2 emu devices"):
        st.load_file(path, device="emu:5")


def test_safetensors_imported_before_torch(tmp_path):
    pytest.importorskip("safetensors")
    path = tmp_path / "t.safetensors"
    r = run_python(
        f"""
        import safetensors, safetensors.torch  # before torch_emu is loaded
        import torch
        safetensors.torch.save_file({{"x": torch.arange(3.0, device="emu")}}, {str(path)!r})
        print(safetensors.torch.load_file({str(path)!r}, device="emu:1")["x"].device)
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "emu:1"
