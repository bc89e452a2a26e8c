"""A metric's stdout that never loses the tail of a write.

Under `python -u` or PYTHONUNBUFFERED (the app sets it for every metric it starts: monitor/metric_worker.py,
host/privhelper.py), sys.stdout writes each string straight to the raw file with one write(2). A write
larger than the pipe has room for blocks after a part is written; a signal then (the stop's SIGINT, whose
handler only sets a flag) ends the call with that part, and the text layer drops the rest without a word
(65,536 of 200,000 bytes arrived in a by-hand check). A buffered writer writes the rest.

    use_buffered_stdout(line_buffered)   # once the arguments are known: line_buffered for output a
                                          # reader wants line by line (by hand, events as they come)
"""

from __future__ import annotations

import io
import sys


def use_buffered_stdout(line_buffered: bool) -> None:
    """Replace an unbuffered sys.stdout by a buffered one on the same descriptor (else leave it: its
    BufferedWriter already writes every byte). Without line buffering the script flushes (Tool.flush,
    once an interval and at the end)."""
    out = sys.stdout
    if out is None or not isinstance(getattr(out, "buffer", None), io.RawIOBase):
        return
    out.flush()
    sys.stdout = open(out.fileno(), "w", buffering=1 if line_buffered else -1,  # noqa: SIM115 - for the run
                      encoding=out.encoding, errors=out.errors, closefd=False)
