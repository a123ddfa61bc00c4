"""What machine a benchmark ran on: printed at the top of every `make bench`."""

from __future__ import annotations

import os
import platform
import subprocess
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return None


def _git_commit() -> str:
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return commit + (" (with uncommitted changes)" if dirty else "")


def postgres_version() -> str:
    """The embedded server's version (the pgserver wheel's binaries), without starting it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
            import pgserver

        binary = Path(pgserver.__file__).parent / "pginstall" / "bin" / "postgres"
        return subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    except (ImportError, OSError, subprocess.CalledProcessError) as exc:
        return f"unknown ({exc})"


def evalbench_source() -> str:
    """Where the benchmark's child processes import evalbench from (PYTHONPATH may point at
    another checkout, e.g. to compare two versions)."""
    import sys

    found = subprocess.run([sys.executable, "-c", "import evalbench; print(evalbench.__file__)"], capture_output=True, text=True,
                           check=False).stdout.strip()
    if not found:
        return "not importable"
    folder = Path(found).resolve().parent.parent
    return "this checkout" if folder == ROOT else str(folder)


def describe() -> list[str]:
    """The lines to print: CPU, cores, RAM, Python, PostgreSQL, load average now, commit."""
    cores = os.cpu_count() or 0
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    ram = _ram_gib()
    load = os.getloadavg()
    return [
        f"cpu       : {_cpu_model()}, {cores} cores ({usable} usable by this process)",
        f"memory    : {ram:.1f} GiB" if ram is not None else "memory    : unknown",
        f"python    : {platform.python_implementation()} {platform.python_version()} on {platform.system()} {platform.release()}",
        f"postgresql: {postgres_version()} (embedded, the pgserver wheel)",
        f"load avg  : {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1, 5, 15 min) at start",
        f"commit    : {_git_commit()}; evalbench imported from {evalbench_source()}",
    ]


def cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of the whole machine so far (Linux /proc/stat), or None."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def cores_busy(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """How many cores the whole machine kept busy on average between two :func:`cpu_ticks`."""
    if before is None or after is None or after[1] == before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1]) * (os.cpu_count() or 1)
