"""`torch-emu-kit new NAME` (also `python -m torch_emu new NAME`): the generated backend package, its validation,
and (kit) its build and conformance."""

import json
import os
import pathlib
import re

import pytest

from torch_emu_kit import scaffold
from torch_emu_kit.cli import main
from torch_emu_kit.scaffold import PLACEHOLDER, TEMPLATE, generate, kit_requirement

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKENS = (PLACEHOLDER, PLACEHOLDER.upper(), "@TORCH_VERSION@", "@KIT_REQUIREMENT@")
EXPECTED = [
    ".ci/run", "README.md", "pyproject.toml", "setup.py", "scripts/setup.sh", "scripts/test.sh",
    "scripts/conformance.sh", "csrc/runtime/runtime.h", "csrc/runtime/runtime.cpp", "csrc/core/check.h",
    "csrc/core/guard.cpp", "csrc/core/allocator.cpp", "csrc/core/generator.h", "csrc/core/generator.cpp",
    "csrc/core/hooks.cpp", "csrc/aten/minimal_ops.cpp", "csrc/aten/fallback.cpp", "csrc/python/module.cpp",
    "torch_{n}/__init__.py", "torch_{n}/device.py", "tests/test_{n}.py",
]

# The files holding one integration point each: quoted by the guide, each names its chapter.
PARTS = [
    "csrc/runtime/runtime.h", "csrc/core/guard.cpp", "csrc/core/allocator.cpp", "csrc/core/generator.h",
    "csrc/core/hooks.cpp", "csrc/aten/minimal_ops.cpp", "csrc/aten/fallback.cpp", "csrc/python/module.cpp",
    "torch_{n}/__init__.py", "torch_{n}/device.py",
]


def files(root: pathlib.Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}


def test_generates_every_part_with_the_name(tmp_path):
    out = generate("mydev", tmp_path / "mydev")
    written = files(out)
    assert sorted(written) == sorted(e.format(n="mydev") for e in EXPECTED)
    assert len(written) == sum(1 for p in TEMPLATE.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path, text in written.items():
        for token in TOKENS:
            assert token.lower() not in path.lower() and token.lower() not in text.lower(), (path, token)
    assert 'mydev = "torch_mydev:_autoload"' in written["pyproject.toml"]
    assert 'rename_privateuse1_backend("mydev")' in written["torch_mydev/__init__.py"]
    assert "MYDEV_DEVICE_COUNT" in written["csrc/runtime/runtime.h"]
    # The backend's environment gets this very kit (scripts/setup.sh installs it from kit/, editable).
    assert kit_requirement() == f"torch-emu-kit @ {(ROOT / 'kit').as_uri()}"
    assert f'"${{TORCH_EMU_KIT:-{kit_requirement()}}}"' in written["scripts/setup.sh"]
    assert "-m torch_emu_kit conformance" in written["scripts/conformance.sh"]
    import torch

    assert f"torch=={torch.__version__.split('+')[0]}" in written["scripts/setup.sh"]
    assert all(os.access(out / s, os.X_OK) for s in ("scripts/setup.sh", "scripts/test.sh", ".ci/run"))


def test_every_part_is_quoted_and_points_to_its_chapter(tmp_path):
    written = files(generate("mydev", tmp_path / "g"))
    for part in PARTS:
        text = written[part.format(n="mydev")]
        assert "LITERALINCLUDE START:" in text, part
        chapter = re.search(r"Guide: torch-emu (docs/guide/\w+\.md)", text)
        assert chapter and (ROOT / chapter.group(1)).is_file(), part


class Installed:
    """importlib.metadata's view of the installed kit: pip's direct_url.json (PEP 610), if any."""

    version = "0.1.0"

    def __init__(self, direct_url: dict | None):
        self.direct_url = direct_url

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return None if self.direct_url is None else json.dumps(self.direct_url)


@pytest.mark.parametrize("direct_url, requirement", [
    (None, "torch-emu-kit==0.1.0"),  # from an index
    ({"url": "file:///src/torch-emu/kit", "dir_info": {}}, "torch-emu-kit @ file:///src/torch-emu/kit"),
    ({"url": "file:///w/torch_emu_kit-0.1.0-py3-none-any.whl", "archive_info": {}},
     "torch-emu-kit @ file:///w/torch_emu_kit-0.1.0-py3-none-any.whl"),
    ({"url": "https://example.org/torch-emu.git", "vcs_info": {"vcs": "git", "commit_id": "0123abc"},
      "subdirectory": "kit"}, "torch-emu-kit @ git+https://example.org/torch-emu.git@0123abc#subdirectory=kit"),
])
def test_the_backend_installs_the_kit_from_where_it_came(monkeypatch, direct_url, requirement):
    monkeypatch.setattr(scaffold.importlib.metadata, "distribution", lambda name: Installed(direct_url))
    assert kit_requirement() == requirement


def test_generated_python_compiles(tmp_path):
    out = generate("mydev", tmp_path / "g")
    for path in out.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")


def test_two_names_are_independent(tmp_path):
    a = files(generate("alphadev", tmp_path / "a"))
    b = files(generate("betadev", tmp_path / "b"))
    assert "torch_alphadev/__init__.py" in a and "torch_betadev/__init__.py" in b
    assert not any("alphadev" in p or "alphadev" in t for p, t in b.items())
    assert not any("betadev" in p or "betadev" in t for p, t in a.items())


@pytest.mark.parametrize("name, why", [
    ("MyDev", "lowercase"), ("1dev", "lowercase"), ("my-dev", "lowercase"), ("", "lowercase"),
    ("class", "keyword"), ("cuda", "device type"), ("meta", "device type"), ("emu", "device type"),
    ("nn", "already exists"), ("abs", "already exists"),
])
def test_bad_names(tmp_path, name, why):
    with pytest.raises(ValueError, match=why):
        generate(name, tmp_path / "g")
    assert not (tmp_path / "g").exists()


def test_bad_directory(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an empty directory"):
        generate("mydev", tmp_path / "full")
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not an empty directory"):
        generate("mydev", tmp_path / "file")
    (tmp_path / "empty").mkdir()
    assert (generate("mydev", tmp_path / "empty") / "setup.py").is_file()


def test_cli(tmp_path, capsys):
    assert main(["new", "clidev", "--dir", str(tmp_path / "ok")]) == 0
    assert (tmp_path / "ok" / "torch_clidev" / "device.py").is_file()
    assert "scripts/setup.sh" in capsys.readouterr().out
    assert main(["new", "Bad", "--dir", str(tmp_path / "bad")]) == 2
    assert capsys.readouterr().err.startswith("error: bad name 'Bad'")
    assert main(["new", "clidev", "--dir", str(tmp_path / "ok")]) == 2
    assert "not an empty directory" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["a" * 300], f"bad name '{'a' * 300}': longer than 64 characters"),
    (["mydev", "--dir", "/proc/nope"], "cannot create /proc/nope: No such file or directory"),
    (["mydev", "--dir", "/proc/nope/deeper"], "cannot create /proc/nope/deeper: No such file or directory"),
    (["mydev", "--dir", "{tmp}/" + "d" * 300], "cannot create {tmp}/" + "d" * 300 + ": File name too long"),
    (["mydev", "--dir", "{tmp}/file/sub"], "cannot create {tmp}/file/sub: Not a directory"),
])
def test_cli_refuses_bad_names_and_directories_before_writing(tmp_path, monkeypatch, args, message, command_here):
    """`python -m torch_emu new`: the backend's command line, which forwards to the kit's."""
    (tmp_path / "file").write_text("")
    monkeypatch.chdir(tmp_path)
    status, _, err = command_here("new", *(a.format(tmp=tmp_path) for a in args))
    assert status == 2 and err == f"error: {message.format(tmp=tmp_path)}\n", err
    assert [p.name for p in tmp_path.iterdir()] == ["file"]  # nothing written


def test_cli_refuses_a_default_directory_it_cannot_create(monkeypatch, command_here):
    """Without --dir the directory is ./NAME: checked the same way."""
    monkeypatch.chdir("/proc")
    status, _, err = command_here("new", "mydev")
    assert status == 2 and err == "error: cannot create /proc/mydev: No such file or directory\n", err
