"""What answers made whole before their first byte hold while they wait to be sent (docs/reliability.md, "Limits").

A transcript is read whole so that no database connection waits for a slow client, and every other answer is
made whole (msgspec encodes it at once); the bytes then wait for the client. A transcript, and any answer larger
than a block, waits here. One budget per process bounds them: in memory up to RESPONSE_MEMORY_BYTES for all
answers together, past it in a temporary file up to RESPONSE_DISK_BYTES, past that a 503 with Retry-After.
An answer's bytes are given back as they are sent, and all of them when its request ends, however it ends
(sent, failed, cancelled, the client gone): the middleware (`releasing`) closes every spool of its request.
"""

from __future__ import annotations

import contextvars
import tempfile
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import IO, Any, Literal

from service.errors import Busy
from service.observability import HELD_BYTES, HELD_RESPONSES

Place = Literal["memory", "disk"]

# The size of each piece handed to the server: the server sends a piece while it waits for the client to take
# the one before (uvicorn's write buffer), so a stalled client holds one piece there, outside the budget.
BLOCK = 64 * 1024


class Budget:
    """Bytes held by the answers of one process waiting to be sent, by place, each bounded by its limit."""

    def __init__(self, memory_bytes: int, disk_bytes: int) -> None:
        self.limits: dict[Place, int] = {"memory": memory_bytes, "disk": disk_bytes}
        self.held: dict[Place, int] = {"memory": 0, "disk": 0}

    def take(self, place: Place, size: int) -> bool:
        """Hold `size` more bytes at `place` if the limit allows; False (nothing held) if not."""
        if self.held[place] + size > self.limits[place]:
            return False
        self.held[place] += size
        HELD_BYTES.labels(place).inc(size)
        return True

    def give(self, place: Place, size: int) -> None:
        self.held[place] -= size
        HELD_BYTES.labels(place).dec(size)


class Spool:
    """One answer's bytes: in memory while the budget lends them, else in a temporary file; then sent in blocks."""

    def __init__(self, budget: Budget) -> None:
        self._budget = budget
        self._blocks: deque[bytes] = deque()
        self._tail = bytearray()  # written, not yet a whole block
        self._file: IO[bytes] | None = None
        self._held = 0  # bytes this spool holds of the budget, at self.place
        self._closed = False

    @property
    def place(self) -> Place:
        return "memory" if self._file is None else "disk"

    def write(self, data: bytes) -> None:
        """Hold `data`; Busy (503, Retry-After) when neither memory nor disk may take it."""
        if self._file is None:
            if self._budget.take("memory", len(data)):
                self._held += len(data)
                if len(data) >= BLOCK:  # kept as it is, not copied (a whole JSON answer)
                    self._end_tail()
                    self._blocks.append(data)
                    return
                self._tail += data
                if len(self._tail) >= BLOCK:
                    self._end_tail()
                return
            self._spill()
        assert self._file is not None
        self._take_disk(len(data))
        self._held += len(data)
        self._file.write(data)

    def _spill(self) -> None:
        """Move what memory holds into a temporary file, and give that memory back."""
        moved = self._held
        self._take_disk(moved)  # refused: the memory stays held until the spool is closed
        file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close)
        try:
            file.writelines([*self._blocks, self._tail])
        except BaseException:
            file.close()
            self._budget.give("disk", moved)
            raise
        self._file = file
        self._blocks.clear()
        self._tail = bytearray()
        self._budget.give("memory", moved)  # the same bytes, now held on disk

    def _take_disk(self, size: int) -> None:
        if not self._budget.take("disk", size):
            HELD_RESPONSES.labels("refused").inc()
            raise Busy(
                "the service holds too many answers waiting for their readers (RESPONSE_MEMORY_BYTES, "
                "RESPONSE_DISK_BYTES); retry"
            )

    async def blocks(self) -> AsyncIterator[bytes]:
        """Every byte written, in blocks of BLOCK. A block's memory is given back once the server has taken it
        (the generator resumes after the send); the file's share when the spool is closed (at the end)."""
        HELD_RESPONSES.labels(self.place).inc()
        self._end_tail()
        if self._file is not None:
            self._file.seek(0)
        try:
            while block := self._next():
                # A block written whole goes to the server in pieces of BLOCK too: given at once, the server
                # would hold all of it in its write buffer, outside the count. A piece of exactly BLOCK is the
                # block itself (bytes slicing does not copy then).
                for at in range(0, len(block), BLOCK):
                    yield block[at : at + BLOCK]
                if self._file is None:  # its last piece taken: nothing holds the block any more
                    self._held -= len(block)
                    self._budget.give("memory", len(block))
        finally:
            self.close()

    def _end_tail(self) -> None:
        if self._tail:
            self._blocks.append(bytes(self._tail))
            self._tail = bytearray()

    def _next(self) -> bytes:
        if self._file is not None:
            return self._file.read(BLOCK)
        return self._blocks.popleft() if self._blocks else b""

    def close(self) -> None:
        """Give back everything held and delete the file; once, whoever calls first."""
        if self._closed:
            return
        self._closed = True
        self._budget.give(self.place, self._held)
        self._held = 0
        self._blocks.clear()
        self._tail = bytearray()
        if self._file is not None:
            self._file.close()


_request: contextvars.ContextVar[tuple[Budget, list[Spool]] | None] = contextvars.ContextVar(
    "held_request", default=None
)


def spool() -> Spool:
    """A spool for the current request's answer, closed when the request ends (see `releasing`)."""
    current = _request.get()
    if current is None:
        raise RuntimeError("no budget for held answers: the app's middleware (held.releasing) is missing")
    budget, spools = current
    made = Spool(budget)
    spools.append(made)
    return made


def releasing(budget: Budget) -> Callable[[Any], Any]:
    """ASGI middleware: each HTTP request may hold answers of `budget`, all given back when it ends. Litestar
    does not close a streamed answer's iterator when the client goes, so this is the one place that sees every
    end of a request, whatever ended it."""

    def wrap(app: Callable[..., Any]) -> Callable[..., Any]:
        async def middleware(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            spools: list[Spool] = []
            token = _request.set((budget, spools))
            try:
                await app(scope, receive, send)
            finally:
                _request.reset(token)
                for made in spools:
                    made.close()

        return middleware

    return wrap
