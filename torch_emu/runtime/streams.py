"""Streams and events of the reference runtime.

A stream is a queue served by a worker thread of its own, started on first
use. Work runs one item at a time, in order; an item submitted to an idle
stream may run on the calling thread instead (what ``emuLaunchKernel`` allows),
and an item submitted by work that is running on the stream runs in place, as
part of it. Events are timestamps taken when the stream reaches them.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Optional

from .interface import EmuError, Error


# LITERALINCLUDE START: REFERENCE_STREAM
class Stream:
    def __init__(self, device: int, priority: int) -> None:
        self.device = device
        self.priority = priority
        self._cv = threading.Condition()
        self._queue: collections.deque[Callable[[], Optional[str]]] = collections.deque()
        self._submitted = 0  # items ever submitted; they complete in this order
        self._completed = 0
        self._running: Optional[int] = None  # thread running an item now
        self._failure: Optional[str] = None  # the first failure nobody reported yet
        self._worker: Optional[threading.Thread] = None
        self._stopping = False

    def runs_here(self) -> bool:
        return self._running == threading.get_ident()

    def submit(self, work: Callable[[], Optional[str]], allow_inline: bool) -> tuple[int, Optional[str]]:
        """Queues ``work``; returns its place in the order and, when it ran on
        this thread, its failure (else None: the worker reports it later)."""
        if self.runs_here():
            return self._submitted, work()
        with self._cv:
            self._submitted += 1
            seq = self._submitted
            if not (allow_inline and self._running is None and self._completed + 1 == seq):
                self._queue.append(work)
                if self._worker is None:
                    self._worker = threading.Thread(target=self._serve, name=f"emu-stream-{self.device}",
                                                    daemon=True)
                    self._worker.start()
                self._cv.notify_all()
                return seq, None
            self._running = threading.get_ident()
        try:
            return seq, work()
        finally:
            self._finish(None)

    def _serve(self) -> None:
        me = threading.get_ident()
        while True:
            with self._cv:
                while not self._stopping and (not self._queue or self._running is not None):
                    self._cv.wait()
                if not self._queue:
                    return
                work = self._queue.popleft()
                self._running = me
            try:
                failure = work()
            except BaseException as e:  # a bug in the work itself must not kill the stream
                failure = f"{type(e).__name__}: {e}"
            self._finish(failure)

    def _finish(self, failure: Optional[str]) -> None:
        with self._cv:
            if failure is not None and self._failure is None:
                self._failure = failure
            self._running = None
            self._completed += 1
            self._cv.notify_all()
# LITERALINCLUDE END: REFERENCE_STREAM

    def wait_until(self, seq: int) -> None:
        """Until the ``seq``-th item has completed (at once from work running here:
        everything before it has)."""
        if self.runs_here():
            return
        with self._cv:
            while self._completed < seq:
                self._cv.wait()

    def drain(self) -> None:
        self.wait_until(self._submitted)

    def pending(self) -> bool:
        return self._completed != self._submitted

    def take_failure(self, handle: int) -> None:
        """Raises the failure of a kernel that ran on the worker, once."""
        with self._cv:
            failure, self._failure = self._failure, None
        if failure is not None:
            raise EmuError(Error.LAUNCH_FAILURE,
                           f"a kernel launched earlier on stream {handle:#x} (emu:{self.device}) failed: {failure}")

    def stop(self) -> None:
        self.drain()
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._worker is not None and self._worker is not threading.current_thread():
            self._worker.join()


class Record:
    """One record of an event: complete once its stream reached it."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.done = threading.Event()
        self.stamp = 0  # time.perf_counter_ns() when completed

    def complete(self) -> None:
        self.stamp = time.perf_counter_ns()
        self.done.set()


class Event:
    def __init__(self, timing: bool) -> None:
        self.timing = timing
        self.record: Optional[Record] = None  # the latest record
