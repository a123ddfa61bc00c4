"""A worker process bound to the life of the process that started it: ``python -m
evalbench.run.parallel.lifeline PARENT_PID run ...`` is ``evalbench run ...`` that ends (SIGKILL) as soon as
PARENT_PID is gone. ``run --workers N`` starts its workers so, and a Ray task its shard's process
(:mod:`evalbench.run.parallel.ray_task`): killing the parent, even with SIGKILL, leaves no worker calling the
agent and writing its shard.

Linux delivers the signal itself (``PR_SET_PDEATHSIG``); everywhere, a watcher thread also checks
the parent every :data:`CHECK_S` seconds (for systems without it, and for a parent that ended
before the request was made).

A command line is readable by every user of the machine (``ps``, ``/proc/PID/cmdline``): an
argument holding a secret (``--set model_config={headers: {Authorization: ...}}``) is shown there
redacted, and its real value travels in the child's environment (readable by its owner only).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

CHECK_S = 0.5
SECRET_ARGS = "EVALBENCH_LIFELINE_ARGS"  # {position: the real argument} of the redacted ones


def command(argv: list[str], parent: int | None = None) -> tuple[list[str], dict[str, str]]:
    """The command line of ``evalbench *argv`` as a child bound to ``parent`` (default: this
    process), secrets redacted, and the environment to start it with (this one's, plus the
    real values of the redacted arguments)."""
    from evalbench.core.redaction import redact_arg

    shown = [redact_arg(arg) for arg in argv]
    secret = {str(i): arg for i, (arg, seen) in enumerate(zip(argv, shown, strict=True)) if arg != seen}
    env = {k: v for k, v in os.environ.items() if k != SECRET_ARGS}
    if secret:
        env[SECRET_ARGS] = json.dumps(secret)
    return [sys.executable, "-m", "evalbench.run.parallel.lifeline", str(os.getpid() if parent is None else parent), *shown], env


def real_argv(shown: list[str]) -> list[str]:
    """The arguments ``command`` was given, from the redacted ones and the environment (which
    then forgets them: a process this one starts does not inherit them)."""
    secret = json.loads(os.environ.pop(SECRET_ARGS, "{}") or "{}")
    return [secret.get(str(i), arg) for i, arg in enumerate(shown)]


def bind_to_parent(parent: int) -> None:
    """End this process (SIGKILL) when ``parent`` ends; at once when it has already ended."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # gone before the request was made: it would never come
        _die()
    threading.Thread(target=_watch, args=(parent,), name="evalbench-lifeline", daemon=True).start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(CHECK_S)
    _die()


def _die() -> None:
    # as PR_SET_PDEATHSIG would: what is half written is cut off by --resume
    os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))


def _main(argv: list[str]) -> None:
    bind_to_parent(int(argv[0]))
    # Ray's workers block SIGINT, and a process inherits that: Ctrl-C (ray.cancel) must reach the run
    if hasattr(signal, "pthread_sigmask"):  # not on Windows
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = ["evalbench", *real_argv(argv[1:])]
    import runpy

    runpy.run_module("evalbench", run_name="__main__", alter_sys=True)  # not an import of evalbench.cli: no cycle


if __name__ == "__main__":
    _main(sys.argv[1:])
