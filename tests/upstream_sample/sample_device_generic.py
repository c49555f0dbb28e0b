"""A device-generic test file in the shape of PyTorch's own (tests/test_upstream_runner.py runs
the upstream runner on it): tests that pass, fail only on the device, fail on both, skip, skip
on CPU only, run on one device type only, and are restricted to CUDA; and a second class, which PyTorch names after
the backend (TestSampleLaterEMU) rather than PRIVATEUSE1, as test_indexing.py's NumpyTests."""

import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests, onlyCPU, onlyCUDA
from torch.testing._internal.common_utils import TestCase, run_tests


def on_cpu(device):
    return torch.device(device).type == "cpu"


class TestSample(TestCase):
    def test_passes(self, device):
        self.assertEqual(torch.ones(3, device=device).sum().item(), 3)

    @dtypes(torch.float32, torch.int64)
    def test_dtypes_pass(self, device, dtype):
        self.assertEqual(torch.arange(4, dtype=dtype, device=device).sum().item(), 6)

    @dtypes(torch.float32, torch.int64)
    def test_fails_on_the_device(self, device, dtype):
        self.assertTrue(on_cpu(device), "differs on the device")

    def test_fails_on_both(self, device):
        raise ValueError("broken everywhere")

    def test_fails_on_cpu_only(self, device):
        self.assertFalse(on_cpu(device), "differs on CPU")

    def test_skips(self, device):
        self.skipTest("not today")

    def test_skipped_on_cpu_fails_on_the_device(self, device):
        if on_cpu(device):
            self.skipTest("a limitation of CPU's")
        raise AssertionError("fails where CPU cannot tell")

    def test_subtest_fails_on_the_device(self, device):
        for i in range(3):
            with self.subTest(i=i):
                self.assertTrue(on_cpu(device) or i < 2, f"subtest {i}")

    @onlyCPU
    def test_cpu_only(self, device):
        pass

    @onlyCUDA
    def test_restricted_passes(self, device):
        self.assertEqual(torch.zeros(2, device=device).sum().item(), 0)

    @onlyCUDA
    def test_restricted_fails(self, device):
        raise AssertionError("needs CUDA")


class TestSampleLater(TestCase):
    def test_later_passes(self, device):
        self.assertEqual(torch.full((2,), 2.0, device=device).sum().item(), 4)


instantiate_device_type_tests(TestSample, globals())
instantiate_device_type_tests(TestSampleLater, globals())

if __name__ == "__main__":
    run_tests()
