"""Emu tensors across processes through torch.multiprocessing (spawn only).

One long-lived server process runs most scenarios (spawning costs seconds);
the Hogwild workers and the misconfigured receiver get their own. Every wait
is bounded: a broken path fails, it never hangs.
"""

import gc

import pytest
import torch
import torch.multiprocessing as mp
from multiprocessing.reduction import ForkingPickler

import _ipc_workers as workers

pytestmark = pytest.mark.launch_mode

CTX = mp.get_context("spawn")
TIMEOUT = 60


def stop(proc):
    proc.join(TIMEOUT)
    if proc.is_alive():
        proc.kill()
        proc.join(5)
        pytest.fail(f"{proc.name} did not exit within {TIMEOUT}s")


@pytest.fixture(scope="module")
def server():
    inbox, outbox = CTX.Queue(), CTX.Queue()
    proc = CTX.Process(target=workers.serve, args=(inbox, outbox), daemon=True)
    proc.start()

    def call(cmd, *args):
        inbox.put((cmd, *args))
        status, result = outbox.get(timeout=TIMEOUT)
        if status == "error":
            raise RuntimeError(result)
        return result

    yield call
    inbox.put(("stop",))
    stop(proc)


def collected_memory():
    gc.collect()
    torch.emu.ipc_collect()
    return [torch.emu.memory_allocated(i) for i in range(torch.emu.device_count())]


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(24.0, device="emu").reshape(4, 6)[1:, ::2],  # strided view with an offset
        lambda: torch.arange(10, dtype=torch.int64, device="emu:1"),
        lambda: torch.ones(3, 2, dtype=torch.bfloat16, device="emu").t(),
        lambda: torch.zeros(0, device="emu"),
    ],
    ids=["strided_view", "int64_emu1", "bfloat16_transposed", "empty"],
)
def test_queue_keeps_metadata_and_consumer_writes_are_seen(server, baseline_memory, make):
    t = make()
    got = server("describe", t)
    assert got["device"] == str(t.device) and got["dtype"] == t.dtype
    assert (got["shape"], got["stride"], got["offset"]) == (tuple(t.shape), t.stride(), t.storage_offset())
    assert torch.equal(got["values"], t.cpu())
    expected = t.cpu() + 5
    server("add", t, 5)
    torch.emu.synchronize()
    assert torch.equal(t.cpu(), expected)
    del t
    collected_memory()


def test_producer_in_child_consumer_in_parent(server, baseline_memory):
    t = server("make", "p", "emu:1")  # the child allocated it, the parent maps it
    assert t.device == torch.device("emu:1") and torch.equal(t.cpu(), torch.arange(6.0).reshape(2, 3))
    t.mul_(-1)
    torch.emu.synchronize(t.device)  # emu:1: synchronize() alone waits for the current device, emu:0
    assert torch.equal(server("read", "p"), -torch.arange(6.0).reshape(2, 3))
    assert server("echo", t).data_ptr() == t.data_ptr()  # back to where it was mapped: the same storage
    server("drop", "p")


def test_parameter_and_gradients(server, baseline_memory):
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0], device="emu"))
    got = server("describe", p)
    assert got["type"] == "Parameter" and got["requires_grad"] and got["is_leaf"]
    grad = server("grad", p)  # backward ran in the receiver, on its own leaf
    assert torch.equal(grad["values"], 2 * p.detach().cpu())
    assert p.grad is None  # as with CUDA, gradients are not shared

    frozen = torch.ones(2, device="emu").requires_grad_(False)
    assert not server("describe", frozen)["requires_grad"]
    with pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf tensor"):
        ForkingPickler.dumps(p * 2)
    del p, frozen
    collected_memory()


def test_pipe(server, baseline_memory):
    ours, theirs = CTX.Pipe()
    t = torch.arange(5.0, device="emu")
    ours.send(t)
    server("pipe", theirs)  # the child receives it, doubles it and sends it back
    assert ours.poll(TIMEOUT), "no answer through the pipe"
    back = ours.recv()
    assert back.data_ptr() == t.data_ptr()
    assert torch.equal(t.cpu(), torch.arange(5.0) * 2)
    del t, back
    collected_memory()


def test_sender_memory_lives_while_receiver_holds_it(server, baseline_memory):
    before = collected_memory()
    t = torch.full((1000,), 3.0, device="emu")
    server("hold", "k", t)
    server("hold", "k2", t)  # the child has it already: it gives this message's reference back
    del t
    held = collected_memory()  # the parent dropped it, the child still holds it
    assert held[0] > before[0]
    decoys = [torch.full((1000,), -1.0, device="emu") for _ in range(4)]  # would reuse a freed block
    assert torch.equal(server("read", "k"), torch.full((1000,), 3.0))
    del decoys
    server("drop", "k")
    assert collected_memory() == held  # still held under "k2"
    server("drop", "k2")
    assert collected_memory() == before


def test_received_storage_is_not_resizable(server, baseline_memory):
    t = torch.ones(4, device="emu")
    with pytest.raises(RuntimeError, match="not resizable"):
        server("resize", t)
    del t
    collected_memory()


def test_file_system_sharing_strategy(server, baseline_memory):
    old = mp.get_sharing_strategy()
    mp.set_sharing_strategy("file_system")  # the reference counts then travel as shm files
    try:
        t = torch.zeros(3, device="emu")
        server("add", t, 1)
        assert torch.equal(t.cpu(), torch.ones(3))
    finally:
        mp.set_sharing_strategy(old)
    del t
    collected_memory()


def test_storages_and_same_process_round_trip(baseline_memory):
    t = torch.arange(4.0, device="emu")
    s = t.untyped_storage()
    back = ForkingPickler.loads(ForkingPickler.dumps(s))  # a receiver in the same process
    assert back.data_ptr() == s.data_ptr() and back.device == s.device
    typed = torch.TypedStorage(wrap_storage=s, dtype=torch.float32, _internal=True)
    typed = ForkingPickler.loads(ForkingPickler.dumps(typed))
    assert typed.dtype == torch.float32 and typed._untyped_storage.data_ptr() == s.data_ptr()
    cpu = torch.arange(3.0)  # CPU tensors still take torch's own path
    assert torch.equal(ForkingPickler.loads(ForkingPickler.dumps(cpu)), cpu)
    del t, s, back, typed
    collected_memory()


def test_errors_are_clear(baseline_memory):
    t = torch.ones(4, device="emu")
    foreign = torch._C._construct_storage_from_data_pointer(t.data_ptr(), t.device, 16)
    with pytest.raises(RuntimeError, match="not allocated by torch-emu's device allocator"):
        ForkingPickler.dumps(foreign)
    del foreign

    # Unpickled in the sending process after the storage died: nothing to map.
    message = ForkingPickler.dumps(t)
    del t
    gc.collect()
    with pytest.raises(RuntimeError, match="the handle was made by this process"):
        ForkingPickler.loads(message)
    collected_memory()  # the failed receiver gave its reference back


def test_receiver_with_other_devices_strict_mode_and_exit(baseline_memory, monkeypatch):
    # A receiver configured differently: one device, strict mode on.
    monkeypatch.setenv("TORCH_EMU_DEVICE_COUNT", "1")
    monkeypatch.setenv("TORCH_EMU_STRICT", "1")
    inbox, (ours, theirs) = CTX.Queue(), CTX.Pipe()
    proc = CTX.Process(target=workers.exit_holding, args=(inbox, theirs), daemon=True)
    proc.start()
    monkeypatch.undo()
    try:
        inbox.put(torch.ones(2, device="emu:1"))
        inbox.put(torch.full((8,), 2.0, device="emu"))
        assert ours.poll(TIMEOUT), "no answer from the receiver"
        error = ours.recv()
        assert "emu:1" in error and "1 emu device(s)" in error and "TORCH_EMU_DEVICE_COUNT" in error, error
        assert ours.poll(TIMEOUT)
        assert ours.recv() == 16.0  # read through a kernel: the mapping is protected like the arena
        assert ours.poll(TIMEOUT)
        produced = ours.recv_bytes()  # the receiver's own tensor, not opened yet
    finally:
        stop(proc)
    assert proc.exitcode == 0
    # Its sender has exited: a clear exception, not a hang.
    with pytest.raises(RuntimeError, match=f"from process {proc.pid}: the sender has exited"):
        ForkingPickler.loads(produced)
    # It exited still holding our tensor; its exit gave the reference back.
    collected_memory()


@pytest.mark.parametrize("strategy", ["file_descriptor", "file_system"])
def test_tensor_from_a_sender_that_has_exited_is_a_clear_error(strategy, baseline_memory):
    ours, theirs = CTX.Pipe()
    proc = CTX.Process(target=workers.send_and_exit, args=(theirs, strategy), daemon=True)
    proc.start()
    try:
        assert ours.poll(TIMEOUT), "nothing from the sender"
        message = ours.recv_bytes()
    finally:
        stop(proc)
    assert proc.exitcode == 0
    # Not the bare FileNotFoundError (or "No such file or directory") of the
    # reference count's shared memory, which went with the sender.
    with pytest.raises(RuntimeError, match=f"from process {proc.pid}: the sender has exited") as error:
        ForkingPickler.loads(message)
    assert isinstance(error.value.__cause__, (OSError, RuntimeError))
    assert torch.ones(2, device="emu").sum().item() == 2  # this process works on


# LITERALINCLUDE START: HOGWILD_TEST
def test_hogwild(baseline_memory):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1).to("emu")
    model.share_memory()  # a no-op on emu, as on CUDA: device memory is shareable already
    assert model.weight.is_shared()
    data, target = torch.randn(32, 8, device="emu"), torch.randn(32, 1, device="emu")
    reference = torch.nn.Linear(8, 1)
    reference.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    steps, lock = 5, CTX.Lock()
    procs = [CTX.Process(target=workers.hogwild, args=(model, data, target, steps, lock)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        stop(p)
        assert p.exitcode == 0
    # The same 2 x 5 SGD steps on CPU, one after the other.
    for _ in range(2 * steps):
        workers.sgd_step(reference, data.cpu(), target.cpu())
    for ours, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours.detach().cpu(), expected.detach())
    del model, data, target
    collected_memory()  # the workers exited; their references came back
# LITERALINCLUDE END: HOGWILD_TEST


def test_out_of_memory_first_frees_what_receivers_let_go(server, baseline_memory):
    # As on CUDA, an allocation that does not fit collects the memory kept
    # only for receivers that have since dropped it before raising OOM.
    collected_memory()
    torch.emu.empty_cache()
    size = 12 << 20  # a segment of its own size (smaller ones share 20 MiB segments)
    total = torch.emu.get_device_properties(0).total_memory
    cap = torch.emu.memory_reserved(0) + size + size // 2  # room for one such tensor, not two
    torch.emu.set_per_process_memory_fraction(cap / total, 0)
    try:
        t = torch.ones(size // 4, device="emu")
        server("hold", "big", t)
        del t  # kept for the receiver
        server("drop", "big")  # the receiver let go; nothing collected it yet
        u = torch.zeros(size // 4, device="emu")  # fits only once that memory is freed
        assert torch.count_nonzero(u).item() == 0
        del u
    finally:
        torch.emu.set_per_process_memory_fraction(1.0, 0)
    collected_memory()
