"""Processes spawned by tests/test_ipc.py (spawn imports this module by name).

Every blocking call has a timeout, so a broken IPC path fails the test
instead of hanging it.
"""

import gc

import torch
import torch.nn.functional as F

TIMEOUT = 60


def describe(t):
    return {
        "type": type(t).__name__,
        "device": str(t.device),
        "dtype": t.dtype,
        "shape": tuple(t.shape),
        "stride": t.stride(),
        "offset": t.storage_offset(),
        "requires_grad": t.requires_grad,
        "is_leaf": t.is_leaf,
        "values": t.detach().cpu(),
    }


def serve(inbox, outbox):
    """Runs the commands the test sends until "stop"; answers each with
    ("ok", result) or ("error", message). Holds tensors it is told to keep."""
    held = {}
    while True:
        try:
            cmd, *args = inbox.get(timeout=TIMEOUT)
        except Exception as e:  # also a message that fails to unpickle
            outbox.put(("error", f"{type(e).__name__}: {e}"))
            continue
        if cmd == "stop":
            break
        try:
            answer = ("ok", _run(cmd, args, held))
        except Exception as e:
            answer = ("error", f"{type(e).__name__}: {e}")
        # Drop what the message brought before answering: the test then
        # checks that the sender got its memory back.
        del args
        gc.collect()
        outbox.put(answer)


def _run(cmd, args, held):
    if cmd == "describe":
        return describe(args[0])
    if cmd == "add":  # consumer modifies what the producer sent
        t, value = args
        t.add_(value)
        torch.emu.synchronize()
        return None
    if cmd == "grad":  # backward in this process, on the received parameter
        p = args[0]
        (p * p).sum().backward()
        return describe(p.grad)
    if cmd == "hold":
        held[args[0]] = args[1]
        return None
    if cmd == "read":
        return held[args[0]].cpu()
    if cmd == "drop":
        del held[args[0]]
        gc.collect()
        return None
    if cmd == "make":  # this process produces, the test consumes
        t = torch.arange(6, dtype=torch.float32, device=args[1]).reshape(2, 3)
        held[args[0]] = t
        return t
    if cmd == "echo":  # forward a received tensor back to its sender
        return args[0]
    if cmd == "pipe":
        conn = args[0]
        t = conn.recv()
        t.mul_(2)
        torch.emu.synchronize()
        conn.send(t)
        conn.close()
        return None
    if cmd == "resize":  # memory the sender would not see
        args[0].untyped_storage().resize_(1 << 20)
        return None
    raise ValueError(f"unknown command {cmd}")


def exit_holding(inbox, conn):
    """A receiver with other settings: reports why it cannot open the first
    tensor, keeps the second, sends one of its own and exits without dropping
    anything (its exit must give the reference back)."""
    try:
        inbox.get(timeout=TIMEOUT)
        conn.send("opened")
    except Exception as e:
        conn.send(f"{type(e).__name__}: {e}")
    kept = inbox.get(timeout=TIMEOUT)
    conn.send(kept.sum().item())
    conn.send(torch.full((4,), 7.0, device="emu"))


def send_and_exit(conn, strategy):
    """Sends one emu tensor under the sharing `strategy` and exits before it is received."""
    torch.multiprocessing.set_sharing_strategy(strategy)
    conn.send(torch.full((4,), 7.0, device="emu"))


# LITERALINCLUDE START: HOGWILD_WORKER
def hogwild(model, data, target, steps, lock):
    """SGD steps on the parameters the parent shares (model.share_memory())."""
    for _ in range(steps):
        with lock:  # taking turns makes the result exact; Hogwild proper runs without it
            sgd_step(model, data, target)
            torch.emu.synchronize()


def sgd_step(model, data, target, lr=0.1):
    # By hand: torch.optim would import torch._dynamo, seconds per spawned worker.
    model.zero_grad()
    F.mse_loss(model(data), target).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
# LITERALINCLUDE END: HOGWILD_WORKER
