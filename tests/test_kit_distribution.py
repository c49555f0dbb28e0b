"""The vendor kit (kit/, distribution torch-emu-kit) on its own, as a vendor installs it: a
pure-Python wheel built from kit/ alone, and its command line installed from that wheel and run
in interpreters where importing torch_emu fails (a vendor's environment has no emu: one backend
owns PrivateUse1). The tutorial's `kit` test installs the kit into a real fresh environment."""

import ast
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
KIT = ROOT / "kit"
PACKAGE = KIT / "torch_emu_kit"

# sitecustomize.py, first on PYTHONPATH: every import of torch-emu's own packages (torch_emu,
# torch_emu_examples) fails, in the command's process and in every process it starts.
BLOCKER = '''
import sys


class NoTorchEmu:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top.startswith("torch_emu") and top != "torch_emu_kit":
            raise ImportError(f"torch-emu is not installed here (import of {name})")


sys.meta_path.insert(0, NoTorchEmu())
'''


def package_files() -> list[str]:
    return sorted(p.relative_to(KIT).as_posix() for p in PACKAGE.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    """The kit's wheel, built from a copy of kit/ alone (nothing else of the checkout, no index)."""
    tmp = tmp_path_factory.mktemp("kit")
    shutil.copytree(KIT, tmp / "kit", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "--quiet", str(tmp / "kit"), "-w", str(tmp / "dist")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    [built] = (tmp / "dist").iterdir()
    return built


@pytest.fixture(scope="module")
def vendor_env(wheel, tmp_path_factory) -> dict:
    """The environment of a command run as a vendor would: the kit installed from the wheel (first
    on sys.path, before the checkout's editable install), torch_emu impossible to import, and no
    backend autoloaded by torch."""
    tmp = tmp_path_factory.mktemp("vendor")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target",
                        str(tmp / "site"), str(wheel)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp / "blocker").mkdir()
    (tmp / "blocker" / "sitecustomize.py").write_text(BLOCKER)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp / "blocker"), str(tmp / "site")]),
            "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "SITE": str(tmp / "site")}


def run(env: dict, *args: str, cwd=None) -> subprocess.CompletedProcess:
    """The wheel's console script, torch-emu-kit ARGS."""
    return subprocess.run([os.path.join(env["SITE"], "bin", "torch-emu-kit"), *args], capture_output=True,
                          text=True, env=env, timeout=300, cwd=cwd)


def test_the_wheel_is_pure_python_with_every_file_of_the_package(wheel):
    assert wheel.name == "torch_emu_kit-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert "Root-Is-Purelib: true" in z.read("torch_emu_kit-0.1.0.dist-info/WHEEL").decode()
        metadata = z.read("torch_emu_kit-0.1.0.dist-info/METADATA").decode()
    assert sorted(n for n in names if not n.startswith("torch_emu_kit-0.1.0.dist-info/")) == package_files()
    assert not [n for n in names if n.endswith((".so", ".pyd", ".dylib", ".o", ".pyc"))]
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist")]
    assert requires == ["Requires-Dist: torch>=2.13"]  # torch only: nothing of torch-emu


def test_no_file_of_the_kit_imports_torch_emu():
    """Static, for the code the command-line runs below do not reach (the checks run on a backend)."""
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level]
        assert not [m for m in imported if m.partition(".")[0] in ("torch_emu", "torch_emu_examples")], path


def test_torch_emu_cannot_be_imported_and_the_kit_is_the_wheels(vendor_env):
    probe = "import torch_emu_kit; print(torch_emu_kit.__file__); import torch_emu"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=vendor_env, timeout=120)
    assert r.stdout.startswith(os.path.join(vendor_env["SITE"], "torch_emu_kit")), r.stdout + r.stderr
    assert r.returncode == 1 and "ImportError: torch-emu is not installed here (import of torch_emu)" in r.stderr


def test_conformance_lists_its_tiers_and_runs_one(vendor_env, tmp_path):
    r = run(vendor_env, "conformance", "--list")
    assert r.returncode == 0 and "device: " in r.stdout and "  check_out_of_memory: " in r.stdout, r.stderr
    # A tier of our own, on the CPU: the tier's process starts and runs its check without torch_emu.
    (tmp_path / "alone.py").write_text(textwrap.dedent('''
        """Runs in a process where torch_emu cannot be imported."""
        import sys

        TIER = "alone"


        def check_no_torch_emu(dev):
            """Nothing of torch-emu is loaded, and it cannot be."""
            assert dev == "cpu" and not [m for m in sys.modules if m.startswith("torch_emu.")]
            try:
                import torch_emu  # noqa: F401
            except ImportError:
                return
            raise AssertionError("torch_emu imported")
        '''))
    report = tmp_path / "report.json"
    r = run(vendor_env, "conformance", "--checks-module", str(tmp_path / "alone.py"), "--tier", "alone",
            "--device", "cpu", "--json", str(report))
    assert r.returncode == 0 and "PASSED: 1/1 tiers" in r.stdout, r.stdout + r.stderr
    assert json.loads(report.read_text())["tiers"][0]["passed"] == 1


def test_upstream_help(vendor_env):
    r = run(vendor_env, "upstream", "--help")
    assert r.returncode == 0 and "--pytorch PATH" in r.stdout and "--skip-file" in r.stdout, r.stderr


def test_new_writes_a_backend_that_installs_this_kit(vendor_env, wheel, tmp_path):
    r = run(vendor_env, "new", "vendordev", "--dir", str(tmp_path / "vendordev"))
    assert r.returncode == 0 and "wrote torch_vendordev" in r.stdout, r.stdout + r.stderr
    assert (tmp_path / "vendordev" / "torch_vendordev" / "__init__.py").is_file()
    # Installed from a wheel, the kit names that wheel for the backend's environment.
    setup = (tmp_path / "vendordev" / "scripts" / "setup.sh").read_text()
    assert f'"${{TORCH_EMU_KIT:-torch-emu-kit @ {wheel.as_uri()}}}"' in setup


def test_tutorial_lists_the_chapters_commands(vendor_env):
    r = run(vendor_env, "tutorial", str(ROOT / "docs" / "guide" / "build_your_own.md"), "--list")
    assert r.returncode == 0 and "exits 0  torch-emu-kit new mydev --dir mydev" in r.stdout, r.stdout + r.stderr


def test_python_dash_m_is_the_same_command(vendor_env):
    r = subprocess.run([sys.executable, "-m", "torch_emu_kit", "--help"], capture_output=True, text=True,
                       env=vendor_env, timeout=120)
    assert r.returncode == 0 and "{conformance,upstream,new,tutorial}" in r.stdout, r.stderr
