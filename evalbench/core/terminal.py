"""What the ``evalbench`` command writes to the terminal is text, never control sequences from data.

Agent replies, SQL, result cells, item fields, manifests and the error messages quoting them are
data: an ESC sequence in them could retitle or clear the reviewer's terminal, a ``\\r`` or
backspaces overwrite a FAIL line, a bidi override reorder what is shown. One mechanism covers every
command: :func:`safe_console`, entered by :func:`evalbench.cli.main` before anything is parsed,
replaces ``sys.stdout`` and ``sys.stderr`` by :class:`SafeStream` wrappers that escape every such
character (:func:`escape`) and scrub known secrets (:mod:`evalbench.core.redaction`) in whatever is
written — ``print``, logging, argparse's errors, tracebacks — so a new command is safe without
thinking about it. The one thing that writes control characters on purpose, a progress bar, is
made by :func:`progress_bar`, which gives tqdm the stream underneath and escapes its label itself.

Escapes are JSON's (``\\u001b``), so JSON written to stdout stays valid and means the same; ``\\n``
and ``\\t`` pass, and ``\\r`` when it ends a line (``\\r\\n``).
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from typing import NoReturn

    from tqdm import tqdm

# C0 controls but \t and \n (a \r only when it does not end a line), DEL and the C1 controls,
# line/paragraph separators, bidi embeddings, overrides, isolates and marks, lone surrogates
_UNSAFE = re.compile("\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group(0)):04x}"


def escape(text: str) -> str:
    """``text`` with every character that controls a terminal instead of showing shown as its
    JSON escape (``\\x1b`` as ``\\u001b``, U+202E as ``\\u202e``); ``\\n``, ``\\t`` and ``\\r\\n`` stay."""
    return _UNSAFE.sub(_escaped, text)


class SafeStream:
    """A text stream that writes :func:`escape`\\ d, secret-free text to the stream it wraps (see
    the module's docstring); everything else (``isatty``, ``fileno``, ``encoding``...) is the
    wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.raw = stream

    def write(self, text: str) -> int:
        from evalbench.core.redaction import knows_secrets, redact_urls, scrub

        if "://" in text:
            text = redact_urls(text)
        if knows_secrets():
            text = scrub(text)
        self.raw.write(escape(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> object:
        return getattr(self.raw, name)


def raw_stream(stream: TextIO | SafeStream) -> TextIO:
    """The stream under a :class:`SafeStream` (``stream`` itself otherwise)."""
    return stream.raw if isinstance(stream, SafeStream) else stream


@contextlib.contextmanager
def safe_console() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` as :class:`SafeStream`\\ s until the block ends."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (SafeStream(s) if not isinstance(s, SafeStream) else s for s in saved)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def escaping_excepthook(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
    """``sys.excepthook`` printing an uncaught exception's traceback as Python does, through a
    :class:`SafeStream` (its message may quote data)."""
    import traceback

    SafeStream(raw_stream(sys.stderr)).write("".join(traceback.format_exception(kind, error, trace)))


def progress_bar(*, desc: str, total: float, unit: str, disable: bool | None, dynamic_ncols: bool = False,
                 initial: float = 0, position: int | None = None, leave: bool | None = True) -> tqdm[NoReturn]:
    """A tqdm bar on stderr: tqdm draws it with ``\\r`` and cursor moves on the stream underneath
    the :class:`SafeStream`; its label, which names data (a database, a run), is escaped here.
    ``disable=None``: off when stderr is not a terminal."""
    from tqdm import tqdm

    return tqdm(desc=escape(desc), file=raw_stream(sys.stderr), total=total, unit=unit, disable=disable,
                dynamic_ncols=dynamic_ncols, initial=initial, position=position, leave=leave)
