"""Preflight: cheap checks of every part of a run, before its first item (``evalbench run``)
or alone (``evalbench check --config FILE``).

Each check answers in one line. A failed check names what failed and how to fix it, and has the
exit code of its kind: 2 for the configuration (an unknown gate metric, a missing API key, an
ADK app the server does not list), 3 for the infrastructure (a server that refuses connections,
a database that cannot be reached, a sandbox role that cannot log in, an output directory that
cannot be written). The checks:

- ``dataset``: the dataset has items for the configured dialects;
- ``scoring``: the scorers can be built, and every ``--fail-under`` / ``--max-regression``
  metric names one the run's summary will have (:func:`gate_metric_names`);
- ``agent``: the agent's own ``probe(timeout_s)`` (beside each adapter: ADK lists the app,
  OpenAI-compatible answers or lists the model, Gemini has credentials, simulated needs nothing);
- ``virtual user``: its ``probe(timeout_s)`` when it has one (the LLM virtual user: credentials,
  and a ``base_url`` that accepts connections);
- ``database <dialect>/<name>``: the server is reachable as admin (for the embedded server,
  starting it is the check) and the sandbox role logs in — with provisioning's own code
  (:func:`evalbench.backends.postgres.provision.sandbox_login`), never loading data;
- ``output directory``: a file can be created where the run directory goes.

Every network wait is bounded by ``timeout_s`` (default 5 s) and the probes run side by side,
so preflight takes seconds. It sends no agent turn and
creates no agent session: an ADK server sees one ``GET /list-apps``, an OpenAI-compatible one a
``GET /models`` and, when the model is not listed there, one chat request of one token.
"""

from __future__ import annotations

import difflib
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evalbench.clients.probes import Unreachable
from evalbench.core.errors import ConfigError, DatasetError, EvalbenchError
from evalbench.results.gates import Threshold, check_rate_value

if TYPE_CHECKING:
    from evalbench.run.items import Items
    from evalbench.run.parts import RunParts
    from evalbench.run.plan import DatabasesSpec, RunPlan

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0
PHASES = ("main", "follow_up")
SUMMARY_METRICS = ("success", "mean_reward")  # gate metrics besides the scorers (evalbench.results.gates.metric_value)
TRIAL_METRICS = ("pass_hat_k", "pass_at_k")  # with trials: pass_hat_k.3 is pass^3 (summary.json: trials)


@dataclass(frozen=True)
class Check:
    """The result of one check: ``detail`` says what was found, or what failed and how to fix it."""

    name: str
    ok: bool
    detail: str
    exit_code: int = 0  # when it failed: 2 configuration, 3 infrastructure

    def line(self) -> str:
        return f"{self.name}: {self.detail}"


def exit_code(checks: Iterable[Check]) -> int:
    """0 when every check passed; else 2 when a configuration check failed (fix it first), else 3."""
    codes = {c.exit_code for c in checks if not c.ok}
    return 0 if not codes else 2 if 2 in codes else 3


# --------------------------------------------------------------------------- the checks


def preflight(plan: RunPlan, items: Items, parts: RunParts, *, gates: Sequence[tuple[str, Threshold]] = (),
              output_dir: Path | None = None, timeout_s: float = TIMEOUT_S) -> list[Check]:
    """Run every check of the run planned by ``plan``, on the items and parts the run then uses
    (the dataset is scanned once, the agent and virtual user built once); ``gates`` are (option,
    threshold) pairs whose metric names are checked; ``output_dir`` is where the run directory
    goes (default: the plan's)."""
    from evalbench.core import deadline

    deadline.reset_cancel()  # a run starts: an earlier run's cancellation (Ctrl-C, the breaker) is over
    where = plan.identity.where
    checks: list[Check] = []
    groups: list[tuple[str, str]] = []

    def dataset() -> str:
        scan = items.found
        if scan.total == 0:  # the run's own message
            raise DatasetError(items.dataset.nothing_to_run(), file=str(plan.items.path))
        groups.extend(sorted(scan.groups))
        errors = f", {len(scan.errors)} malformed record(s) skipped" if scan.errors else ""
        return f"{scan.total} items on {', '.join(f'{d}/{n}' for d, n in groups)}{errors}"

    checks.append(_attempt("dataset", dataset, where))
    checks.append(_attempt("scoring", lambda: _scoring(parts), where))
    if gates:  # command-line options, not the config file's
        checks.append(_attempt("gates", lambda: _gates(plan, gates), None))
    probes: list[tuple[str, Callable[[], str]]] = [
        (f"agent {plan.agent.agent}", lambda: _probe(parts.agent, timeout_s, "no probe for this agent: not checked")),
        (f"virtual user {plan.vuser.vuser}", lambda: _probe(parts.vuser, timeout_s, "offline: nothing to reach")),
    ]
    if plan.serve is not None:
        probes.append(("served tools", lambda: _served(parts)))
    probes += [(f"database {d}/{n}", _database_probe(plan.databases, d, n, timeout_s)) for d, n in groups]
    probes.append(("output directory", lambda: _output_dir(output_dir or plan.output.root)))
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="evalbench-preflight") as pool:
        futures = [pool.submit(_attempt, name, probe, where) for name, probe in probes]
        checks += [future.result() for future in futures]
    return checks


def _attempt(name: str, probe: Callable[[], str], where: str | None) -> Check:
    """``probe()`` as a :class:`Check`: its return value is the detail, its error the failure."""
    try:
        return Check(name, True, probe())
    except ConfigError as exc:
        if exc.file is None and where is None:
            return Check(name, False, exc.message, 2)
        if exc.file is None:  # built from a mapping: name the file it came from
            exc = ConfigError(exc.message, file=where, line=exc.line, key=exc.key)
        return Check(name, False, str(exc), 2)
    except EvalbenchError as exc:
        return Check(name, False, str(exc), exc.exit_code)
    except (KeyError, ValueError) as exc:  # e.g. an unknown scorer or agent name
        return Check(name, False, str(exc.args[0] if exc.args else exc), 2)
    except Exception as exc:  # a bug in a probe: reported as what failed, never a traceback
        log.debug("preflight %s failed", name, exc_info=True)
        return Check(name, False, f"{type(exc).__name__}: {exc}", 3)


def _scoring(parts: RunParts) -> str:
    _ = parts.scorers  # built: e.g. the llmrater's client needs its key
    return f"scorers {', '.join(parts.scoring.scorers)}"


def _gates(plan: RunPlan, gates: Sequence[tuple[str, Threshold]]) -> str:
    validate_gates(plan, gates)
    return f"the metrics {', '.join(t.metric for _, t in gates)} are known"


def _served(parts: RunParts) -> str:
    served = parts.served
    assert served is not None
    what = [name for name, on in (("MCP at /mcp", served.config.mcp), ("BIRD-Interact's /ask", served.config.user_simulator)) if on]
    return f"listening at {served.base_url}: {', '.join(what) or 'nothing'}" + (", database logins lent" if served.config.db_logins else "")


def _probe(part: object, timeout_s: float, without: str) -> str:
    """The part's own ``probe(timeout_s)`` (the agent's, the virtual user's), or ``without``."""
    probe = getattr(part, "probe", None)
    return str(probe(timeout_s)) if probe is not None else without


# --------------------------------------------------------------------------- gate metrics


def gate_metric_names(scorers: Iterable[str], trials: int = 1) -> list[str]:
    """The metrics a gate may name in a run with these scorers (``plan.scorers``: those listed
    and those the primary verdict adds): ``success`` and each scorer, bare or with ``.main`` /
    ``.follow_up``, and ``mean_reward`` — what the run's summary.json holds; with trials also
    ``pass_hat_k.K``, ``pass_at_k.K`` (K up to the trials) and ``consistency``."""
    names = list(SUMMARY_METRICS)
    for base in ("success", *scorers):
        names += [f"{base}.{phase}" for phase in PHASES]
        if base not in names:
            names.append(base)
    if trials > 1:
        names += [f"{base}.{k}" for base in TRIAL_METRICS for k in range(1, trials + 1)] + ["consistency"]
    return names


def check_gate_metrics(gates: Sequence[tuple[str, Threshold]], scorers: Iterable[str], trials: int = 1) -> None:
    """ConfigError (exit 2) for the first gate whose metric the run will not have."""
    scorers = list(scorers)
    known, means = gate_metric_names(scorers, trials), _mean_scorers(scorers)
    for option, threshold in gates:
        if threshold.metric in known:
            if threshold.metric.partition(".")[0] not in means:
                check_rate_value(option, threshold)
            continue
        close = difflib.get_close_matches(threshold.metric, known, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        bare = [name for name in known if "." not in name]
        raise ConfigError(f"{option} {threshold.text}: unknown metric {threshold.metric!r}; {hint}this run's metrics are "
                          f"{', '.join(bare)} (add .follow_up for the follow-up phase)")


def _mean_scorers(scorers: Iterable[str]) -> set[str]:
    """The scorers among ``scorers`` that report a mean, not a rate (``turn_count``)."""
    from evalbench.scoring import SCORERS

    return {name for name in scorers if name in SCORERS and getattr(SCORERS.get(name), "is_metric", False)}


def validate_gates(plan: RunPlan, gates: Sequence[tuple[str, Threshold]]) -> None:
    """The gate metric check alone (``run --no-preflight`` still makes it): a misspelt metric
    fails before the run, not after it. Scoring settings that do not resolve are left to the run."""
    if not gates:
        return
    try:
        scoring = plan.scoring.plan(None)
    except (KeyError, ValueError):
        return
    check_gate_metrics(gates, list(scoring.scorers), plan.conversation.trials)


# --------------------------------------------------------------------------- databases


def _database_probe(spec: DatabasesSpec, dialect: str, database: str, timeout_s: float) -> Callable[[], str]:
    return lambda: check_database(spec, dialect, database, timeout_s)


def check_database(spec: DatabasesSpec, dialect: str, database: str, timeout_s: float = TIMEOUT_S) -> str:
    """The database's backend reaches it (the server as admin, the sandbox login; or its file),
    and the database exists or has a setup to create it from."""
    from evalbench.backends.base import DatabaseUnavailable
    from evalbench.run.databases import database as database_of

    try:
        return database_of(spec, dialect, database).probe(timeout_s)
    except DatabaseUnavailable as exc:
        raise Unreachable(str(exc)) from None


# --------------------------------------------------------------------------- the output directory


def _output_dir(directory: Path) -> str:
    """A file can be created in ``directory``, or in the nearest folder above it that exists
    (the run makes the rest); nothing is left behind."""
    directory = Path(directory)
    fix = "choose another with --output-dir or reporting.csv.output_directory"
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise EvalbenchError(f"{directory} cannot be created: {existing} is not a directory; {fix}")
    try:
        handle, path = tempfile.mkstemp(prefix=".evalbench-preflight-", dir=existing)
        os.close(handle)
        os.unlink(path)
    except OSError as exc:
        raise EvalbenchError(f"cannot write in {existing} ({exc.strerror or exc}); {fix}") from None
    return f"{directory} is writable" if existing == directory else f"{directory} can be created in {existing}"
