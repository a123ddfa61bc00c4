"""The run plan: the run config resolved once into the parts each stage of a run needs.

:meth:`RunPlan.resolve` is the one function that reads the whole :class:`~evalbench.config.RunConfig`
(a test fails when a module outside ``config/``, this one and the CLI imports it). Every other
module of the run receives only its part, the way a backend receives a ``DatabaseConfig``:

========================  ===================================================================
``items``                 which items: the dataset file, format, dialects, query types, subset
``scoring``               the scorers, the primary verdict, whether plain-language answers pass
``conversation``          the budgets of one conversation: turns, patience, timeout, trials, seed
``databases``             per (dialect, database): its config, setup files, sandbox limits
``concurrency``           stage pool sizes, conversations in flight, the shard's share
``output``                where the run directory goes and what the journal keeps
``agent`` / ``vuser``     the agent's and the virtual user's own config models
``identity``              the redacted config snapshot, its fingerprint, the config file
========================  ===================================================================

The plan is frozen and does no I/O beyond what resolving the config's paths already did.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from evalbench.backends.base import SandboxLimits
from evalbench.backends.setup import SetupFiles, find_setup
from evalbench.config.agents import AgentConfig
from evalbench.config.databases import DatabaseConfig, database_for
from evalbench.config.prices import ModelPrice
from evalbench.config.serve import ServeConfig
from evalbench.config.vusers import VUserConfig
from evalbench.core.conversation import Stage
from evalbench.dataset import Dataset
from evalbench.dataset.shard import parse_shard
from evalbench.dataset.subset import Subset

if TYPE_CHECKING:
    from evalbench.config import RunConfig
    from evalbench.scoring.plan import ScoringPlan

MAX_PARALLEL_GROUPS = 4  # (dialect, database) groups provisioned and fed at once


@dataclass(frozen=True)
class ItemsSpec:
    """Which items a run evaluates, and where their knowledge is."""

    path: Path
    format: str
    dialects: tuple[str, ...]
    query_types: tuple[str, ...] | None
    subset: Subset | None  # None: every item
    knowledge_path: Path | None  # where ``<db>_kb.jsonl`` (and column meanings) are looked for
    knowledge_directory: Path | None  # set in the config: it must hold the databases' knowledge
    where: str | None  # the config file, named in errors

    def dataset(self) -> Dataset:
        """The dataset, not yet read (:class:`evalbench.run.items.Items` scans it once)."""
        return Dataset(self.path, self.format, self.dialects, self.query_types)


@dataclass(frozen=True)
class ScoringSpec:
    """How answers are judged: the scorers with their options, the primary verdict."""

    scorers: Mapping[str, Mapping[str, object] | None]
    primary: Mapping[str, object] | None
    accept_nl_answers: bool
    follow_up: bool  # the follow-up phase is asked (its goldens are checked too)

    def plan(self, dataset_format: str | None) -> ScoringPlan:
        """The scoring plan of a dataset of ``dataset_format`` (ValueError for inconsistent settings)."""
        from evalbench.scoring.plan import plan_scoring

        options = {name: dict(value) if value is not None else None for name, value in self.scorers.items()}
        return plan_scoring(options, dict(self.primary) if self.primary is not None else None,
                            self.accept_nl_answers, dataset_format)


@dataclass(frozen=True)
class ConversationSpec:
    """The budgets of every conversation, and how many of each item a run holds."""

    max_turns: int
    patience: int
    timeout_s: float
    debug_attempts: int
    follow_up: bool
    trials: int
    seed: int


@dataclass(frozen=True)
class DatabasePart:
    """What a backend takes to serve one (dialect, database) group: the shape of ``Backend``'s methods."""

    dialect: str
    name: str  # as the items name it
    config: DatabaseConfig
    setup_directory: Path | None
    limits: SandboxLimits
    embedded_dir: Path | None

    def setup(self, setup_dialects: Sequence[str]) -> SetupFiles | None:
        return find_setup(self.setup_directory, self.name, self.dialect, setup_dialects)


@dataclass(frozen=True)
class DatabasesSpec:
    """The run's databases: the configured ones, and how any group's database is found."""

    configs: tuple[DatabaseConfig, ...]
    setup_directory: Path | None
    embedded_dir: Path | None
    pool_size: int  # connections per database (the execute stage's threads)
    statement_timeout_s: float
    max_rows: int
    max_result_bytes: int
    where: str | None

    def config_for(self, dialect: str, database: str) -> DatabaseConfig:
        return database_for(self.configs, dialect, database)

    def for_group(self, dialect: str, database: str) -> DatabasePart:
        config = self.config_for(dialect, database)
        limits = SandboxLimits(
            pool_size=self.pool_size,
            statement_timeout_s=config.statement_timeout_s or self.statement_timeout_s,
            max_rows=config.max_rows or self.max_rows,
            executions_per_minute=config.max_executions_per_minute,
            max_result_bytes=self.max_result_bytes,
        )
        return DatabasePart(dialect, database, config, self.setup_directory, limits, self.embedded_dir)


@dataclass(frozen=True)
class ConcurrencySpec:
    """How much runs at once: threads per stage, conversations in flight, groups fed in parallel."""

    stages: Mapping[Stage, int]
    max_in_flight: int
    parallel_groups: int
    shard: str | None  # this process runs one shard of a split and takes its share of every limit

    @property
    def shares(self) -> int:
        """Into how many shares every rate and concurrency limit is split (1: not a shard)."""
        return parse_shard(self.shard).count if self.shard else 1


@dataclass(frozen=True)
class OutputSpec:
    """Where the run directory goes and what the journal keeps."""

    root: Path
    run_id: str | None  # None: made from the time and the config file's name
    preview_rows: int


@dataclass(frozen=True)
class Identity:
    """What names and fingerprints the run: the manifest and ``--resume`` read it."""

    snapshot_json: str  # the redacted config, as the manifest records it
    fingerprint: str
    source: Path | None
    seed: int
    scorers: tuple[str, ...]  # as listed in the config

    @property
    def where(self) -> str | None:
        return str(self.source) if self.source else None

    def snapshot(self) -> dict[str, object]:
        """A fresh copy of the redacted config (the manifest's, which resume may then edit)."""
        value: dict[str, object] = json.loads(self.snapshot_json)
        return value


@dataclass(frozen=True)
class RunPlan:
    """A run config resolved into the parts of a run (see the module docstring)."""

    items: ItemsSpec
    scoring: ScoringSpec
    conversation: ConversationSpec
    databases: DatabasesSpec
    concurrency: ConcurrencySpec
    output: OutputSpec
    agent: AgentConfig
    vuser: VUserConfig
    prices: Mapping[str, ModelPrice]
    serve: ServeConfig | None
    identity: Identity

    @classmethod
    def resolve(cls, config: RunConfig) -> RunPlan:
        where = str(config.source) if config.source else None
        subset = config.subset
        chosen = (Subset(subset.item_ids, subset.sample, subset.limit, config.seed, subset.shard)
                  if subset is not None else None)
        runners, execution = config.runners, config.execution
        return cls(
            items=ItemsSpec(config.dataset_config, config.dataset_format, tuple(config.dialects),
                            tuple(config.query_types) if config.query_types else None,
                            None if chosen is None or chosen.empty else chosen, config.knowledge_path,
                            config.knowledge_directory, where),
            scoring=ScoringSpec(MappingProxyType(dict(config.scorers)), config.primary, config.accept_nl_answers,
                                config.follow_up_enabled),
            conversation=ConversationSpec(config.max_turns, getattr(config.vuser, "patience", 3), config.conversation_timeout_s,
                                          config.debug_attempts, config.follow_up_enabled, config.trials, config.seed),
            databases=DatabasesSpec(tuple(config.database_configs), config.setup_directory, config.embedded.data_dir,
                                    runners.sqlexec_runners, execution.statement_timeout_s, execution.max_rows,
                                    execution.max_result_bytes, where),
            concurrency=ConcurrencySpec(
                MappingProxyType({Stage.PROMPT: runners.promptgen_runners, Stage.GENERATE: runners.sqlgen_runners,
                                  Stage.VUSER: runners.vuser_runners, Stage.EXECUTE: runners.sqlexec_runners,
                                  Stage.SCORE: runners.scoring_runners}),
                config.max_in_flight, MAX_PARALLEL_GROUPS, subset.shard if subset else None),
            output=OutputSpec(config.reporting.csv.output_directory, config.run_id, execution.preview_rows),
            agent=config.agent,
            vuser=config.vuser,
            prices=MappingProxyType(dict(config.prices)),
            serve=config.serve,
            identity=Identity(json.dumps(config.snapshot()), config.fingerprint(), config.source, config.seed,
                              tuple(config.scorers)),
        )
