"""The docs build warning-free (every literalinclude marker must exist), and CI runs the README's test command."""

import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_docs_build_without_warnings(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_ci_runs_the_readme_test_command_first():
    """CI proves the README: the second of its two commands is CI's first stage, with no argument
    added (a stage that runs only part of the suite must not stand in for it)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Two commands", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["bash scripts/setup.sh", "bash scripts/test.sh"], commands
    stages = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("stage ")]
    assert stages[0].endswith(" " + commands[1]), stages[0]
