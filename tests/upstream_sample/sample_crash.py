"""A test file whose device process dies in the middle of a test (a crash in a kernel)."""

import os

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestCrash(TestCase):
    def test_a_passes(self, device):
        self.assertEqual(torch.ones(1, device=device).item(), 1)

    def test_b_crashes_on_the_device(self, device):
        if torch.device(device).type != "cpu":
            os.abort()

    def test_c_never_runs_on_the_device(self, device):
        pass


instantiate_device_type_tests(TestCrash, globals())
