"""PyTorch's own distributed test suite run against emu_gloo.

``torch.testing._internal.distributed.distributed_test.DistributedTest._DistTestBase``
is the suite PyTorch runs for its own c10d backends (test/distributed/
test_distributed_spawn.py: one class per backend, BACKEND/WORLD_SIZE/TEMP_DIR
in the environment, MultiProcessTestCase spawning one process per rank).
``TestDistEmu`` is that class for emu: BACKEND=emu_gloo, 2 ranks, each rank on
``emu:<rank>`` with emu as its default device, so the tensors the suite
creates without a device are emu tensors and go through emu_gloo; rendezvous
through a file store, Gloo on the loopback interface, spawn.

The suite gates many tests on backend names ("gloo", "nccl", "mpi") or on CUDA;
those skip themselves with the suite's own reason. Of the rest, SKIPPED below
lists what does not apply and why, QUICK runs by default (the CI budget), and
everything else that applies is marked ``dist_suite_full`` and runs with
TORCH_EMU_DIST_SUITE=full.
"""

import fnmatch
import os
import unittest

import pytest
import torch

# The suite reads these when it is imported (decorators, module constants).
_IMPORT_ENV = {"BACKEND": "emu_gloo", "WORLD_SIZE": "2"}
# ... and these while it runs, in the test process and in the spawned ranks.
_RUN_ENV = {
    **_IMPORT_ENV,
    "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"),  # loopback only
    "OMP_NUM_THREADS": "1",
}
FULL = os.environ.get("TORCH_EMU_DIST_SUITE") == "full"

_saved = {k: os.environ.get(k) for k in _IMPORT_ENV}
os.environ.update(_IMPORT_ENV)
# Bounded: a test whose ranks have not finished after this many seconds is killed.
os.environ.setdefault("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", "120")
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

# PyTorch's registry of what each backend implements: emu_gloo is a plugin
# backend that supports DDP and subgroups (as Gloo does).
for _feature in ("plugin", "ddp", "subgroup"):
    DistTestCases.backend_feature[_feature].add("emu_gloo")

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

for _k, _v in _saved.items():  # the rest of a pytest session keeps its environment
    if _v is None:
        os.environ.pop(_k)
    else:
        os.environ[_k] = _v

# LITERALINCLUDE START: DIST_SUITE_SKIPPED
# Tests the suite does not skip by itself for emu_gloo but that do not apply, and
# why: fnmatch pattern -> reason, one line each, first match wins; None: applies.
SKIPPED = {
    "*_cuda*": "CUDA tensors (.cuda(), torch.cuda streams)",
    "*_gpu": "CUDA devices (skip_if_no_gpu)",
    "test_barrier*": "torch.DoubleTensor (legacy constructor) ignores the default device: a CPU tensor, not emu",
    "test_DistributedDataParallel_SyncBatchNorm*": "SyncBatchNorm tests build CUDA modules (skip_if_no_gpu)",
    "test_DistributedDataParallel_with_amp_and_grad_is_view": "CUDA autocast and GradScaler (skip_if_no_gpu)",
    "test_new_subgroups_*": "CUDA devices (skip_if_no_gpu)",
    "test_DistributedSampler_padding": "one CUDA device per rank (skip_if_lt_x_gpu)",
    "test_ddp_logging_data_cpu": None,
    "test_ddp_create_graph": None,
    "test_ddp_*": "modules on torch.cuda devices (skip_if_lt_x_gpu / skip_if_no_gpu)",
    "test_*model_averager*": "model averagers over CUDA modules (skip_if_lt_x_gpu)",
    "test_average_parameters": "CUDA modules (skip_if_lt_x_gpu)",
    "test_post_localSGD_*": "CUDA modules (skip_if_lt_x_gpu)",
    "test_get_data_parallel_params": "CUDA modules (skip_if_lt_x_gpu)",
    "test_output_unused_in_loss_*": "CUDA modules (skip_if_lt_x_gpu)",
    "test_stateless_api_with_ddp": "CUDA modules (skip_if_lt_x_gpu)",
    "test_undefined_grad_parity_unused_parameters": "CUDA modules (skip_if_lt_x_gpu)",
    "test_detect_ddp_is_actually_static": "CUDA modules (skip_if_lt_x_gpu)",
    "test_destroy_group": None,  # uses ranks [0, 1] when there are 2
    "test_get_rank_size_group": None,  # same
    "*_full_group": None,
    "*_full_group_*": None,
    "test_*_group": "the subgroup [1, 2] needs 3 ranks; this run has 2 (the *_full_group twin runs)",
    "test_*_group_*": "the subgroup [1, 2] needs 3 ranks; this run has 2 (the *_full_group twin runs)",
}
# LITERALINCLUDE END: DIST_SUITE_SKIPPED

# LITERALINCLUDE START: DIST_SUITE_QUICK
# Run by default (the CI budget: each test spawns its ranks, ~5 s): a collective
# of each kind, point to point, groups, DDP on the default device.
QUICK = {
    "test_get_backend", "test_destroy_full_group", "test_broadcast", "test_all_reduce_sum_async",
    "test_all_reduce_sum_complex", "test_scatter", "test_all_gather", "test_send_recv_any_source",
    "test_DistributedDataParallelCPU", "test_ddp_logging_data_cpu",
}
# LITERALINCLUDE END: DIST_SUITE_QUICK


def skip_reason(name: str):
    return next((why for pattern, why in SKIPPED.items() if fnmatch.fnmatchcase(name, pattern)), None)


# LITERALINCLUDE START: DIST_SUITE_CLASS
class TestDistEmu(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()  # temp dirs (TEMP_DIR, INIT_METHOD) and the file barrier
        self._spawn_processes()

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe, **kwargs):
        # In each spawned rank, before c10d is initialised: this rank's emu
        # device is current and the default device of the suite's tensors.
        torch.emu.set_device(rank)
        torch.set_default_device(torch.device("emu", rank))
        super()._run(rank, test_name, file_name, pipe, **kwargs)
# LITERALINCLUDE END: DIST_SUITE_CLASS


def _select(cls) -> None:
    for name in [n for n in dir(cls) if n.startswith("test_")]:
        fn = getattr(cls, name)
        if getattr(fn, "__unittest_skip__", False):
            continue  # the suite's own gate (backend name, CUDA)
        reason = skip_reason(name)
        if reason is not None:
            setattr(cls, name, unittest.skip(reason)(fn))
        elif name not in QUICK:
            gated = unittest.skipUnless(FULL, "long part of the selection: TORCH_EMU_DIST_SUITE=full")(fn)
            setattr(cls, name, pytest.mark.dist_suite_full(gated))


_select(TestDistEmu)


@pytest.fixture(autouse=True, scope="module")
def _suite_environment():
    """The suite's environment while its tests run (spawned ranks inherit it)."""
    saved = {k: os.environ.get(k) for k in _RUN_ENV}
    os.environ.update(_RUN_ENV)
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k)
        else:
            os.environ[k] = v
