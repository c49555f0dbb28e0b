"""Backward of emu tensors on the calling thread, and only theirs.

For accelerator tensors the autograd engine runs backward on a worker thread of
its own per device, so that a host thread can keep queuing asynchronous kernels.
Emu queues its kernels too, but they are CPU code on the host's own cores: a
second host thread issuing the backward competes with the stream worker for
them, costs a thread switch per backward and a second OpenMP team whose threads
sleep between parallel regions. Measured on 2 cores with kernels queued (the
default) when this was introduced, eager Adam steps took longer with it: MLP 2.8
against 1.9 ms, CNN 12.0 against 7.0, transformer block 6.9 against 5.1, LSTM LM
128 against 67. With today's kernels the gap is in short steps (an MLP step 0.87
against 0.76 ms; a CNN's and a transformer block's within noise).

PyTorch's switch for it (``torch.autograd.set_multithreading_enabled``) is a
setting of the calling thread for every device: set at import, it took the
device threads from a CUDA program too. So emu sets it only around a backward
whose roots are emu tensors, through the one function every ``backward`` and
``autograd.grad`` goes through (PyTorch's own compiler patches it the same way).
"""

import functools

import torch
from torch.autograd import graph


# LITERALINCLUDE START: AUTOGRAD_THREADS
def _has_emu_root(roots) -> bool:
    return any(isinstance(root, torch.Tensor) and root.device.type == "emu" for root in roots)


def install() -> None:
    run_backward = graph._engine_run_backward
    if getattr(run_backward, "emu_on_calling_thread", False):
        return

    @functools.wraps(run_backward)
    def run_backward_of_emu_on_calling_thread(roots, *args, **kwargs):
        # A user's own set_multithreading_enabled(False) stays theirs: left as it is.
        if not torch._C._is_multithreading_enabled() or not _has_emu_root(roots):
            return run_backward(roots, *args, **kwargs)
        torch._C._set_multithreading_enabled(False)
        try:
            return run_backward(roots, *args, **kwargs)
        finally:
            torch._C._set_multithreading_enabled(True)

    run_backward_of_emu_on_calling_thread.emu_on_calling_thread = True
    graph._engine_run_backward = torch.autograd._engine_run_backward = run_backward_of_emu_on_calling_thread
# LITERALINCLUDE END: AUTOGRAD_THREADS
