"""/proc files that hold text a process chose, read without failing on it: its comm (the kernel cuts it
at 15 bytes, maybe inside a UTF-8 character), the Name: line of its status, the comm in its stat.
Strict UTF-8 raised UnicodeDecodeError out of an interval's loop; a byte that does not decode becomes
U+FFFD, as the BPF side's comm is decoded (maps.process_name), so both name a process alike."""

from __future__ import annotations


def read_text(path: str) -> str | None:
    """The file's text; None when it cannot be read (the process has gone)."""
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return None
