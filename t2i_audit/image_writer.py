"""A bounded background writer: the next batch is denoised while the last one is encoded and written.

PNG encoding (zlib), sha256, the atomic write and the record append take tens of milliseconds an image
at 1024²; done in line they leave the GPU idle between batches. One thread takes finished batches from a
small queue (``depth`` batches wait at most, so memory stays bounded and a slow disk slows generation
instead of filling RAM) and runs the same ``write`` the loop ran before, in the same order: PNGs first
(atomically), then the batch's records, so a kill at any moment still leaves no record without its file
and no torn file. The images are the same bytes (the same encoder, on the same arrays).

An error in the writer (a full disk) is raised in the generating thread at its next ``submit`` or at
``close``; batches already queued behind the failed one are not written (a rerun makes them).
"""

from __future__ import annotations

import queue
import threading
from typing import Callable


class BatchWriter:
    """``submit(*args)`` queues ``write(*args)``; ``close()`` waits for every queued write and re-raises."""

    def __init__(self, write: Callable[..., None], depth: int = 2):
        self._write = write
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._error: BaseException | None = None  # the first failure: every later batch is skipped
        self._reported = False
        self._thread = threading.Thread(target=self._loop, name="t2i-audit-writer", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if self._error is None:
                try:
                    self._write(*job[0], **job[1])
                except BaseException as e:  # noqa: BLE001 - handed to the generating thread
                    self._error = e

    def _raise(self) -> None:
        if self._error is not None and not self._reported:
            self._reported = True
            raise self._error

    def submit(self, *args, **kwargs) -> None:
        """Queue one batch; blocks while ``depth`` batches already wait (bounded memory)."""
        self._raise()
        self._queue.put((args, kwargs))

    def close(self) -> None:
        """Write everything queued, stop the thread, raise the writer's error if there was one."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise()

    def __enter__(self) -> "BatchWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # the loop failed (or was interrupted): what was made is still written before the error goes on
            self.close()
        except BaseException:  # noqa: BLE001 - the loop's own error is the one to report
            pass
