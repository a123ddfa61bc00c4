"""Confinement of the process that runs a dataset's test-case code (Linux; elsewhere it degrades,
and says so): resource limits, Landlock (files readable only under the Python installation and
the evalbench package, nothing writable, no TCP, no signals or abstract sockets outside the
process), and a seccomp filter (no socket of any kind, no new program or process, no file
creation or modification, no tracing or signalling other processes, no namespaces, mounts,
io_uring or BPF). The process keeps its pipes to its parent: that is its only way out.

:func:`confine` applies what the platform allows and returns the list of what was applied,
which the runner records in the verdict messages of a failure and docs/security.md describes.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

# --------------------------------------------------------------------------- resource limits


def limit_resources(cpu_s: float, memory_bytes: int = 2 << 30, open_files: int = 64) -> None:
    """CPU time, address space, no file data written (FSIZE 0), few descriptors, no core dumps."""
    limits = [
        (resource.RLIMIT_CPU, max(1, int(cpu_s))),
        (resource.RLIMIT_AS, memory_bytes),
        (resource.RLIMIT_FSIZE, 0),
        (resource.RLIMIT_NOFILE, open_files),
        (resource.RLIMIT_CORE, 0),
    ]
    for which, value in limits:
        _soft, hard = resource.getrlimit(which)
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (cap, cap))


# --------------------------------------------------------------------------- landlock

_LANDLOCK_CREATE, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT = 444, 445, 446
_FS_READ = (1 << 0) | (1 << 2) | (1 << 3)  # EXECUTE, READ_FILE, READ_DIR
_FS_FILE_READ = (1 << 0) | (1 << 2)  # what a rule on a file (not a directory) may grant
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock(readable: Sequence[str | os.PathLike[str]]) -> str | None:
    """Restrict the process to reading (and executing) ``readable``; nothing written anywhere, no
    TCP bind or connect, no signals or abstract unix sockets outside the process. Returns what
    was applied, or None when the kernel has no Landlock."""
    libc = _libc()
    abi = libc.syscall(_LANDLOCK_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return None
    attr = _RulesetAttr(handled_access_fs=_FS_BY_ABI.get(abi, (1 << 16) - 1),
                        handled_access_net=3 if abi >= 4 else 0,  # BIND_TCP | CONNECT_TCP
                        scoped=3 if abi >= 6 else 0)  # ABSTRACT_UNIX_SOCKET | SIGNAL
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(_LANDLOCK_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return None
    try:
        for path in readable:
            _allow(libc, ruleset, Path(path))
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            return None
        if libc.syscall(_LANDLOCK_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return None
    finally:
        os.close(ruleset)
    extra = ", no TCP" if abi >= 4 else ""
    extra += ", no signals or abstract sockets outside" if abi >= 6 else ""
    return f"landlock v{abi}: read-only under the Python installation and evalbench{extra}"


def _allow(libc: ctypes.CDLL, ruleset: int, path: Path) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path that does not exist here
    try:
        rule = _PathBeneath(allowed_access=_FS_READ if path.is_dir() else _FS_FILE_READ, parent_fd=fd)
        libc.syscall(_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0))
    finally:
        os.close(fd)


def readable_paths() -> list[str]:
    """What the confined process may read: the Python installation (standard library, site
    packages), the evalbench package, system libraries and time zones."""
    import site

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, str(Path(__file__).parent.parent)}  # the evalbench package
    paths.update(p for p in site.getsitepackages() if os.path.isdir(p))
    paths.update(("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/share/zoneinfo", "/etc/localtime", "/dev/null",
                  "/dev/urandom"))
    return sorted(paths)


# --------------------------------------------------------------------------- seccomp

_EPERM, _ENOSYS = 1, 38
_O_WRITE = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000  # O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND
_CLONE_THREAD = 0x10000
_TIOCSTI = 0x5412



class SyscallTable(TypedDict):
    """An architecture's syscall numbers (``open``: None where there is none)."""

    arch: int
    open: int | None
    openat: int
    clone: int
    ioctl: int
    eperm: list[int]
    enosys: list[int]


_X86_64 = SyscallTable(
    arch=0xC000003E, open=2, openat=257, clone=56, ioctl=16,
    eperm=[41, 53, 42, 49, 50, 43, 288, 59, 322, 57, 58, 85, 87, 263, 82, 264, 316, 83, 258, 84, 88, 266, 86, 265, 90, 91,
           268, 452, 92, 93, 94, 260, 76, 77, 133, 259, 132, 235, 280, 261, 101, 310, 311, 62, 200, 234, 129, 297, 424,
           434, 438, 112, 109, 165, 166, 155, 161, 308, 272, 321, 298, 250, 248, 249, 425, 426, 427, 323, 304, 303, 300,
           135, 246, 175, 313, 176, 169, 167, 163, 179, 160, 302],
    enosys=[435, 437],  # clone3, openat2: callers fall back to clone / openat, which are checked
)
_AARCH64 = SyscallTable(
    arch=0xC00000B7, open=None, openat=56, clone=220, ioctl=29,
    eperm=[198, 199, 200, 201, 202, 203, 242, 221, 281, 35, 38, 276, 34, 36, 37, 52, 53, 452, 55, 54, 45, 46, 33, 88,
           117, 270, 271, 129, 130, 131, 138, 240, 424, 434, 438, 157, 154, 40, 39, 41, 51, 268, 97, 280, 241, 219, 217,
           218, 425, 426, 427, 282, 265, 264, 262, 92, 104, 105, 273, 106, 142, 224, 89, 60, 164, 261],
    enosys=[435, 437],
)


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


_LD, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000


def _errno(code: int) -> int:
    return 0x00050000 | code


def _arg(index: int) -> int:
    return 16 + 8 * index  # the low 32 bits of seccomp_data.args[index] (little endian)


def seccomp_program(table: SyscallTable) -> list[tuple[int, int, int, int]]:
    """The BPF program for an architecture's syscall table (see the module doc)."""
    prog = [(_LD, 0, 0, 4), (_JEQ, 1, 0, table["arch"]), (_RET, 0, 0, _KILL), (_LD, 0, 0, 0)]
    if table["arch"] == _X86_64["arch"]:
        prog += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, _errno(_ENOSYS))]  # the x32 ABI
    for nr in table["eperm"]:
        prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, _errno(_EPERM))]
    for nr in table["enosys"]:
        prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, _errno(_ENOSYS))]
    checks = [(table["openat"], 2, _JSET, _O_WRITE, False), (table["clone"], 0, _JSET, _CLONE_THREAD, True),
              (table["ioctl"], 1, _JEQ, _TIOCSTI, False)]
    if table["open"] is not None:
        checks.append((table["open"], 1, _JSET, _O_WRITE, False))
    for nr, index, test, value, allow_when_true in checks:
        verdict = (1, 0) if allow_when_true else (0, 1)  # (jt, jf) around the EPERM that follows
        prog += [(_LD, 0, 0, 0), (_JEQ, 0, 3, nr), (_LD, 0, 0, _arg(index)), (test, *verdict, value),
                 (_RET, 0, 0, _errno(_EPERM))]
    return [*prog, (_RET, 0, 0, _ALLOW)]


def seccomp() -> str | None:
    """Install the filter (after which it cannot be removed). None when the platform has none."""
    table: SyscallTable | None = {"x86_64": _X86_64, "aarch64": _AARCH64}.get(platform.machine())
    if table is None or not sys.platform.startswith("linux"):
        return None
    program = seccomp_program(table)
    filters = (_SockFilter * len(program))(*[_SockFilter(*instruction) for instruction in program])
    fprog = _SockFprog(len(program), filters)
    libc = _libc()
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return None
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        return None
    return "seccomp: no sockets, programs, processes, file changes, tracing, signals to others"


# --------------------------------------------------------------------------- all of it


def confine(cpu_s: float) -> list[str]:
    """Apply every confinement the platform allows, in order; what was applied."""
    applied = []
    limit_resources(cpu_s)
    applied.append(f"rlimits: {int(cpu_s)} s CPU, 2 GiB memory, no file data written, 64 descriptors")
    if sys.platform.startswith("linux"):
        libc = _libc()
        libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG SIGKILL: die with the runner
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no /proc/<pid>/mem for others
        fenced = landlock(readable_paths())
        if fenced is None and os.geteuid() == 0:
            fenced = _drop_to_nobody()
        if fenced:
            applied.append(fenced)
        filtered = seccomp()
        if filtered:
            applied.append(filtered)
    return applied


def _drop_to_nobody() -> str | None:
    """Without Landlock, a root process gives up root (files readable by root stay private)."""
    try:
        import pwd

        nobody = pwd.getpwnam("nobody")
        os.setgroups([])
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)
    except (KeyError, OSError):
        return None
    return "runs as nobody (no Landlock on this kernel)"
