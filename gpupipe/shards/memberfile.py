"""One member of an open tar as a read-only file, read by offset (what reads an image's header in a tar)."""

from __future__ import annotations

import io
import os

from . import format as shardfmt


class MemberFile(io.RawIOBase):
    """One member of an open tar as a read-only file (read by offset: PIL reads the header only)."""

    def __init__(self, fd: int, member: shardfmt.Member) -> None:
        super().__init__()
        self.fd, self.member, self.pos = fd, member, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.member.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer) -> int:
        size = max(0, min(len(buffer), self.member.size - self.pos))
        data = os.pread(self.fd, size, self.member.offset + self.pos)
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


__all__ = ["MemberFile"]
