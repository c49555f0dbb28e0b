"""torch.emu: the torch.cuda-style device runtime API."""

import pytest
import torch
from conftest import first_use_errors, run_python

from torch_emu.runtime.config import env_flag


def test_backend_is_named_emu():
    assert torch._C._get_privateuse1_backend_name() == "emu"
    assert torch.device("emu:1").type == "emu"


def test_availability_and_count():
    assert torch.emu.is_available()
    assert torch.emu.device_count() == 2  # the default


def test_current_and_set_device():
    assert torch.emu.current_device() == 0
    torch.emu.set_device(1)
    try:
        assert torch.emu.current_device() == 1
        assert torch.empty(1, device="emu").device == torch.device("emu:1")
    finally:
        torch.emu.set_device(0)
    torch.emu.set_device("emu:1")
    assert torch.emu.current_device() == 1
    torch.emu.set_device(torch.device("emu", 0))
    assert torch.emu.current_device() == 0


def test_device_context_managers():
    with torch.emu.device(1):
        assert torch.emu.current_device() == 1
        with torch.emu.device("emu:0"):
            assert torch.emu.current_device() == 0
        assert torch.emu.current_device() == 1
    assert torch.emu.current_device() == 0
    t = torch.ones(2, device="emu:1")
    with torch.emu.device_of(t):
        assert torch.emu.current_device() == 1
    with torch.emu.device_of(torch.ones(2)):  # CPU tensor: no change
        assert torch.emu.current_device() == 0


def test_bad_device_inputs():
    with pytest.raises(RuntimeError, match=r"emu:5.*2 emu devices"):
        torch.emu.set_device(5)
    with pytest.raises(ValueError, match="Expected an emu device"):
        torch.emu.set_device("cpu")
    with pytest.raises(TypeError):
        torch.emu.set_device(1.5)
    with pytest.raises(RuntimeError, match=r"emu:7"):
        torch.empty(3, device="emu:7")
    with pytest.raises(RuntimeError, match=r"emu:3"):
        torch.ones(3).to("emu:3")
    assert torch.emu.current_device() == 0


@pytest.mark.launch_mode
def test_device_properties():
    props = torch.emu.get_device_properties(0)
    assert props.name == torch.emu.get_device_name(0) == "emu (emulated accelerator)"
    assert props.total_memory == torch.emu.mem_get_info(0)[1]
    assert torch.emu.get_device_capability(0) == (props.major, props.minor)
    assert props.multi_processor_count >= 1
    assert "total_memory" in repr(props)


def test_generated_methods():
    x = torch.arange(4.0)
    y = x.emu()
    assert y.is_emu and not x.is_emu
    assert y.device == torch.device("emu:0")
    assert x.emu(1).device == torch.device("emu:1")
    m = torch.nn.Linear(2, 2).emu()
    assert all(p.device.type == "emu" for p in m.parameters())
    s = torch.arange(3, dtype=torch.float32).untyped_storage().emu()
    assert s.device.type == "emu"


def test_initialisation_state():
    torch.emu.init()
    assert torch.emu.is_initialized()


@pytest.mark.launch_mode
def test_accelerator_api():
    assert torch.accelerator.current_accelerator() == torch.device("emu")
    assert torch.accelerator.device_count() == 2
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    torch.accelerator.set_device_index(0)
    with torch.accelerator.device_index(1):
        assert torch.emu.current_device() == 1
    torch.accelerator.synchronize(1)


# ---- boolean environment variables: one reading in C++ and Python -----------

BOOLEAN_SPELLINGS = "expected 1/0, true/false, yes/no or on/off"


def test_boolean_spellings(monkeypatch):
    name = "TORCH_EMU_FALLBACK_ERROR"
    for value, expected in [("1", True), ("true", True), (" Yes ", True), ("ON", True),
                            ("0", False), ("False", False), ("no", False), ("off\n", False)]:
        monkeypatch.setenv(name, value)
        assert env_flag(name, default=not expected) is expected, value
    for value in ("", "  "):
        monkeypatch.setenv(name, value)
        assert env_flag(name) is False and env_flag(name, default=True) is True
    monkeypatch.delenv(name)
    assert env_flag(name, default=True) is True
    monkeypatch.setenv(name, "maybe")
    with pytest.raises(ValueError, match=f"^{name}='maybe' is not a boolean: {BOOLEAN_SPELLINGS}$"):
        env_flag(name)


# erf has no native kernel: it runs through the fallback.
FLAGS_CODE = """
import torch, torch_emu
x = torch.ones(2, device="emu")
try:
    print(torch.erf(x).cpu().tolist() == torch.erf(torch.ones(2)).tolist())
except NotImplementedError:
    print("NotImplementedError")
print(torch_emu._C._native_kernels(), torch_emu._C._strict_mode())
"""


@pytest.mark.parametrize("spelling, expected", [
    ("off", ["True", "False", "False"]),  # "off" used to turn TORCH_EMU_FALLBACK_ERROR on
    ("Yes", ["NotImplementedError", "True", "True"]),
])
def test_boolean_variables_read_in_cpp_and_python(spelling, expected):
    result = run_python(FLAGS_CODE, TORCH_EMU_RUNTIME="native", TORCH_EMU_FALLBACK_REPORT="no",
                        TORCH_EMU_FALLBACK_ERROR=spelling, TORCH_EMU_NATIVE_KERNELS=spelling,
                        TORCH_EMU_STRICT=spelling)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == expected
    assert "emu fallback report" not in result.stderr


@pytest.mark.parametrize("variable, error", [
    ("TORCH_EMU_FALLBACK_ERROR", "ValueError"),  # read in Python
    ("TORCH_EMU_FALLBACK_REPORT", "ValueError"),
    ("TORCH_EMU_NATIVE_KERNELS", "ImportError"),  # read in C++ as the extension loads
])
def test_a_bad_boolean_fails_import_naming_it(variable, error):
    result = run_python("""
        try:
            import torch
        except RuntimeError as e:  # autoload wraps what importing torch_emu raised
            print(type(e.__cause__).__name__, e.__cause__)
    """, TORCH_DEVICE_BACKEND_AUTOLOAD="1", **{variable: "maybe"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{error} {variable}='maybe' is not a boolean: {BOOLEAN_SPELLINGS}"


def test_a_bad_strict_flag_fails_every_use_naming_it():
    assert first_use_errors(TORCH_EMU_RUNTIME="native", TORCH_EMU_STRICT="maybe") == [
        f"AcceleratorError TORCH_EMU_STRICT='maybe' is not a boolean: {BOOLEAN_SPELLINGS}"] * 2
