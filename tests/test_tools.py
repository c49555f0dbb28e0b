"""Vendor tools: the fallback report and the operator coverage table."""

import json
import os
import subprocess
import sys

import pytest
import torch

import torch_emu.tools as tools


def test_fallback_report_records_ops_with_counts():
    model = torch.nn.Linear(4, 2).emu()
    x = torch.randn(3, 4, device="emu")
    with tools.fallback_report() as report:
        for _ in range(3):
            torch.erf(model(x)).sum().backward()
    ops = dict((name, calls) for name, calls, _ in report.records)
    assert ops["aten::erf"] == 3  # erf has no native emu kernel: it falls back
    assert "aten::addmm" not in ops  # native (csrc/aten/kernels/)
    assert all(seconds >= 0 for _, _, seconds in report.records)
    assert "aten::erf" in report.table() and "calls" in report.table()
    # Outside the block nothing is recorded any more.
    torch.erf(x)
    with tools.fallback_report() as empty:
        pass
    assert empty.records == []


def test_fallback_as_error_names_the_op():
    x = torch.ones(2, device="emu")
    with pytest.raises(NotImplementedError, match="aten::erf"):
        with tools.fallback_report(error=True):
            torch.erf(x)
    assert torch.erf(x).tolist() == torch.erf(torch.ones(2)).tolist()  # back to normal afterwards
    # Native kernels are not affected by error mode.
    with tools.fallback_report(error=True):
        y = torch.empty(3, device="emu")
        y.copy_(torch.arange(3.0))
        y = torch.relu(y - 1) * 2
    assert y.cpu().tolist() == [0.0, 0.0, 2.0]


def test_fallback_report_from_environment():
    code = "import torch\nx = torch.ones(4, device='emu')\ntorch.erf(x).sum().item()\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "TORCH_EMU_FALLBACK_REPORT": "1"})
    assert r.returncode == 0, r.stderr
    assert "emu fallback report" in r.stderr and "aten::erf" in r.stderr


def test_coverage_classifies_operators():
    cov = tools.operator_coverage()
    assert cov["aten::empty_strided"] == "native"
    assert cov["aten::_copy_from"] == "native"
    assert cov["aten::erf"] == "fallback"  # structured op routed to the fallback
    assert cov["aten::add.Tensor"] == "native"  # csrc/aten/kernels/
    assert cov["aten::relu"] == "native"
    assert cov["aten::linear"] == "composite"
    assert set(cov.values()) <= {"native", "fallback", "composite", "unsupported"}
    assert len(cov) > 2000


def test_coverage_command_line():
    r = subprocess.run([sys.executable, "-m", "torch_emu", "coverage", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert sum(data["totals"].values()) == len(data["operators"])
    r = subprocess.run([sys.executable, "-m", "torch_emu", "coverage", "--kind", "native"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "aten::_local_scalar_dense" in r.stdout and "aten::erf " not in r.stdout


def test_coverage_into_a_closed_pipe():
    # `python -m torch_emu coverage | head -3`: the reader leaves early.
    p = subprocess.Popen([sys.executable, "-m", "torch_emu", "coverage"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("emu operator coverage")
    p.stdout.close()
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0 and "Traceback" not in err, err
