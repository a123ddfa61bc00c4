"""Opening the files of a run or shard directory that may not be ours: every reader of a run
directory (``report``, ``--resume``, ``merge``, ``compare``, ``explain``, ``runs``, ``view``,
``rescore``, ``--baseline``, ``--workers`` and Ray) opens its files here.

A run directory may come from anywhere (a colleague's archive, a CI artifact, an agent that wrote
into it), so nothing in it is trusted: a file is read only when it is a regular file inside the
run directory once symlinks are resolved (a FIFO, a device, a directory or a symlink leading out
of the folder is refused before it is read, so nothing hangs or reads forever), a JSON file is
read up to :data:`MAX_JSON_BYTES`, a journal line up to :data:`MAX_LINE_BYTES` (a longer one is
skipped without being held), and JSON nested deeper than :data:`MAX_DEPTH` is refused (the
readers' recursive code stays far from Python's recursion limit). Every refusal is a
:class:`~evalbench.core.errors.RunDirError` naming the file: exit 2, never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from evalbench.core.errors import RunDirError

MAX_JSON_BYTES = 32 * 1024 * 1024  # manifest.json, summary.json: a few kB to a few MB when evalbench writes them
MAX_LINE_BYTES = 16 * 1024 * 1024  # a journal record is capped at 64 KiB (a very long conversation may exceed it)
MAX_JOURNAL_BYTES = 16 * 1024**3  # a quarter of a million records at their cap: reading it takes seconds, not hours
MAX_DEPTH = 64  # evalbench's own files nest about 8 deep
_CHUNK = 1 << 20


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _size(limit: int) -> str:
    return f"{limit >> 30} GiB" if limit >= 1 << 30 else f"{limit >> 20} MiB"


@contextlib.contextmanager
def open_run_file(run_dir: Path, name: str, *, missing_ok: bool = False,
                  max_bytes: int = MAX_JOURNAL_BYTES) -> Iterator[BinaryIO | None]:
    """``run_dir/name`` opened for reading in binary, once checked to be a regular file inside
    ``run_dir`` (after resolving symlinks) of at most ``max_bytes``; None when it does not exist
    and ``missing_ok``."""
    path = Path(run_dir) / name
    try:
        base = Path(run_dir).resolve(strict=True)
        real = path.resolve(strict=True)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise RunDirError("a symlink to nothing: refused", file=str(path)) from None
        if missing_ok and Path(run_dir).is_dir():
            yield None
            return
        if not Path(run_dir).is_dir():
            raise RunDirError("no such directory (a run directory written by evalbench?)", file=str(run_dir)) from None
        raise RunDirError(f"no such file: {run_dir} has no {name} (is it a run directory written by evalbench?)",
                          file=str(path)) from None
    except (OSError, RuntimeError) as exc:  # a symlink loop, a permission
        raise RunDirError(f"cannot resolve the path: {getattr(exc, 'strerror', None) or exc}", file=str(path)) from None
    if real != base and base not in real.parents:
        raise RunDirError(f"a symlink leading out of the run directory (to {real}): refused", file=str(path))
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise RunDirError(f"cannot open it: {exc.strerror or exc}", file=str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RunDirError(f"{_kind(info.st_mode)}, not a regular file: refused", file=str(path))
        if info.st_size > max_bytes:
            raise RunDirError(f"{info.st_size} bytes, more than the {_size(max_bytes)} evalbench reads of this file: refused",
                              file=str(path))
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_json(run_dir: Path, name: str, *, missing_ok: bool = False) -> object:
    """The JSON value of ``run_dir/name`` (a BOM is accepted); None when it does not exist and ``missing_ok``."""
    with open_run_file(run_dir, name, missing_ok=missing_ok, max_bytes=MAX_JSON_BYTES) as handle:
        if handle is None:
            return None
        try:
            raw = handle.read(MAX_JSON_BYTES + 1)
        except OSError as exc:
            raise RunDirError(f"cannot read it: {exc.strerror or exc}", file=str(Path(run_dir) / name)) from None
    where = str(Path(run_dir) / name)
    if len(raw) > MAX_JSON_BYTES:
        raise RunDirError(f"more than the {_size(MAX_JSON_BYTES)} evalbench reads of this file: refused", file=where)
    return parse_json(raw, where)


def parse_json(raw: bytes, where: str, line: int | None = None) -> object:
    """``raw`` as JSON: UTF-8 (a BOM is accepted), nested at most :data:`MAX_DEPTH` deep; a
    :class:`RunDirError` naming ``where`` (and ``line``) says what is wrong."""
    try:
        value = loads(raw)
    except UnicodeDecodeError as exc:
        raise RunDirError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})", file=where,
                          line=line) from None
    except json.JSONDecodeError as exc:
        raise RunDirError(f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})", file=where, line=line) from None
    except RecursionError:
        raise RunDirError(f"not valid JSON (nested more than {MAX_DEPTH} levels deep)", file=where, line=line) from None
    except ValueError as exc:  # a number of too many digits; nesting (loads)
        raise RunDirError(f"not valid JSON ({exc})", file=where, line=line) from None
    return value


def loads(raw: bytes) -> object:
    """``json.loads`` of UTF-8 bytes (a BOM is accepted), refusing nesting deeper than
    :data:`MAX_DEPTH` (a ValueError); UnicodeDecodeError and JSONDecodeError as ``json.loads`` raises them."""
    value: object = json.loads(raw.decode("utf-8-sig"))
    if too_deep(value):
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    return value


def too_deep(value: object, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests lists and objects more than ``limit`` deep (iteratively: no recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def journal_lines(handle: BinaryIO, start: int = 0) -> Iterator[tuple[int, bytes | None]]:
    """The lines of a journal from ``start``: (offset, the line with its newline — the last may
    lack one), or (offset, None) for a line longer than :data:`MAX_LINE_BYTES`, which is skipped
    without being held in memory."""
    offset = start
    handle.seek(start)
    while True:
        raw = handle.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) <= MAX_LINE_BYTES or raw.endswith(b"\n"):
            yield offset, raw
            offset += len(raw)
            continue
        skipped = len(raw)
        while not raw.endswith(b"\n"):  # the rest of the long line, a chunk at a time
            raw = handle.readline(_CHUNK)
            if not raw:
                break
            skipped += len(raw)
        yield offset, None
        offset += skipped
