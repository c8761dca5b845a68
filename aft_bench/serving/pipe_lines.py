"""The lines a client writes to a served episode's stdin, read on the event loop where stdin is a pipe or a socket.

The SDK reads stdin in a worker thread that no cancellation reaches: a `serve` told to stop (SIGTERM) recorded its
episode, then waited for the client's next line or its exit (60 s and more with a client holding a hung call).
Read this way, stopping cancels the read and `serve` ends at once."""

from __future__ import annotations

import asyncio
import os
import stat
from typing import AsyncIterator

CHUNK = 1 << 16


def pipe_lines(fd: int = 0) -> PipeLines | None:
    """stdin's lines as the SDK's stdio transport takes them, or None where stdin is neither a pipe nor a socket
    (a terminal or a file: a non-blocking read there would change it for whoever else holds it; the SDK's own
    reader serves those)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return None
    return PipeLines(fd) if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) else None


class PipeLines:
    """An async iterable of the text lines (UTF-8, undecodable bytes replaced, each with its newline) read from a
    pipe through the running loop: no thread, so a cancelled read ends at once. A line may be any length. While it
    reads, `fd` points at the null device (as the SDK's own reader does), so no child started meanwhile (a fixture
    or probe command) can read the client's messages; it points at the pipe again after."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.private = os.dup(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, fd)
        os.close(null)

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=CHUNK, loop=loop)
        pipe = os.fdopen(self.private, "rb", buffering=0, closefd=False)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
        try:
            held = b""
            while chunk := await reader.read(CHUNK):
                *whole, held = (held + chunk).split(b"\n")
                for line in whole:
                    yield line.decode("utf-8", errors="replace") + "\n"
            if held:
                yield held.decode("utf-8", errors="replace")
        finally:
            transport.close()
            os.dup2(self.private, self.fd)
            os.close(self.private)
