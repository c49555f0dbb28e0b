"""``torch-emu-kit new NAME [--dir DIR]``: writes a new, independent PrivateUse1 backend.

The package it writes (device ``NAME``, Python package ``torch_NAME``) is the minimal
integration, in small files each quoted by docs/guide/scaffold.md: a driver over host memory,
device guard, caching allocator, hooks, generator, the minimal operators plus a CPU fallback,
the device module, tests and scripts. ``template/`` holds those files with ``tpldev`` (and
``TPLDEV``) where the name goes; generation substitutes them in contents and file names. The
backend's ``scripts/setup.sh`` installs this very kit into the backend's environment (where its
``scripts/conformance.sh`` runs the suite), from where it was installed: ``kit_requirement()``.
"""

import argparse
import importlib.metadata
import json
import keyword
import os
import pathlib
import re
import shutil
import sys

from ..argtypes import output_folder

TEMPLATE = pathlib.Path(__file__).resolve().parent / "template"
PLACEHOLDER = "tpldev"
# c10::DeviceType names (c10/core/DeviceType.cpp) and emu's own: torch knows these already.
DEVICE_TYPES = frozenset(
    "cpu cuda mkldnn opengl opencl ideep hip fpga maia xla vulkan metal xpu mps meta hpu ve lazy ipu mtia "
    "privateuseone privateuse1 emu".split()
)
# File names are made from the name (torch_NAME, pip's __editable___torch_NAME_0_1_0_finder.py):
# this keeps them far below the file systems' 255 bytes.
MAX_NAME = 64


def check_name(name: str) -> None:
    """Raises ValueError unless ``name`` can be a new device type and Python package."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name or ""):
        raise ValueError(f"bad name {name!r}: use a lowercase Python identifier such as 'mydev' "
                         "(letters, digits, underscores; starting with a letter)")
    if len(name) > MAX_NAME:
        raise ValueError(f"bad name {name!r}: longer than {MAX_NAME} characters")
    if keyword.iskeyword(name):
        raise ValueError(f"bad name {name!r}: it is a Python keyword")
    if name in DEVICE_TYPES:
        raise ValueError(f"bad name {name!r}: torch already has a device type of that name")
    import torch  # torch.NAME is the device module and Tensor.NAME() the copy method: both must be free

    if hasattr(torch, name) or hasattr(torch.Tensor, name):
        raise ValueError(f"bad name {name!r}: torch.{name} or torch.Tensor.{name} already exists")


def check_directory(directory: pathlib.Path) -> None:
    # os.path.exists, not Path.exists: False for a name too long, which output_folder then names
    if os.path.exists(directory) and (not directory.is_dir() or any(directory.iterdir())):
        raise ValueError(f"{directory} exists and is not an empty directory")
    output_folder(str(directory))  # a ValueError naming it when it cannot be made or written


def kit_requirement() -> str:
    """The pip requirement of this kit as installed: its source (PEP 610's direct_url.json: a
    folder, an archive, a git commit) when pip recorded one, else its version on the index."""
    dist = importlib.metadata.distribution("torch-emu-kit")
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if not direct:
        return f"torch-emu-kit=={dist.version}"
    url = direct["url"]
    if "vcs_info" in direct:
        url = f"{direct['vcs_info']['vcs']}+{url}@{direct['vcs_info']['commit_id']}"
    if "subdirectory" in direct:
        url += f"#subdirectory={direct['subdirectory']}"
    return f"torch-emu-kit @ {url}"


def generate(name: str, directory: str | pathlib.Path) -> pathlib.Path:
    """Writes the backend ``name`` into ``directory`` (created; must not exist or be empty)."""
    check_name(name)
    directory = pathlib.Path(directory).resolve()
    check_directory(directory)
    values = {
        PLACEHOLDER: name,
        PLACEHOLDER.upper(): name.upper(),
        "@TORCH_VERSION@": importlib.metadata.version("torch").split("+")[0],
        "@KIT_REQUIREMENT@": kit_requirement(),
    }
    pattern = re.compile("|".join(map(re.escape, values)))
    directory.mkdir(parents=True, exist_ok=True)
    for source in sorted(TEMPLATE.rglob("*")):
        if source.is_dir() or "__pycache__" in source.parts:
            continue
        target = directory / pattern.sub(lambda m: values[m.group()], str(source.relative_to(TEMPLATE)))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(pattern.sub(lambda m: values[m.group()], source.read_text()))
        shutil.copymode(source, target)  # the scripts stay executable
    return directory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="device name, also the package's (torch_NAME): a lowercase identifier")
    parser.add_argument("--dir", help="directory to write (default ./NAME); must not exist or be empty")


def run(args: argparse.Namespace) -> int:
    try:
        path = generate(args.name, args.dir or args.name)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote torch_{args.name} to {path}\nnext: cd {path} && bash scripts/setup.sh && bash scripts/test.sh")
    return 0
