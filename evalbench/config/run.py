"""The run config: what to evaluate, with which agent and virtual user, how it is scored and reported.

The pydantic models of this package are the single source of truth for keys and defaults. They accept
Google EvalBench's run-config and db-config keys and add our own. Every model forbids unknown
keys; :func:`evalbench.config.load.load_run_config` turns validation errors into messages that name the file, the
line and the key path. Paths are resolved relative to the file that names them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from evalbench.config.agents import (
    AgentConfig,
    agent_shorthand,
)
from evalbench.config.compat import (
    ORCHESTRATORS,
    compat_notes,
    rejected_run_key,
    scorer_aliases,
)
from evalbench.config.databases import DatabaseConfig, Dialect, database_for
from evalbench.config.plugins import scorer_problem
from evalbench.config.prices import ModelPrice
from evalbench.config.primary import parse_primary
from evalbench.config.serve import ServeConfig
from evalbench.config.types import (
    ExistingPath,
    ResolvedPath,
    StrictModel,
    resolve_files,
)
from evalbench.config.vusers import RulesVUserConfig, VUserConfig, vuser_shorthand
from evalbench.core.redaction import redact
from evalbench.core.registries import SCORERS
from evalbench.dataset.session_state import SERVED_NAMES, placeholders


class ExecutionConfig(StrictModel):
    statement_timeout_s: float = Field(10.0, gt=0, description="time budget of one execution (all its statements), golden and generated SQL alike; an agent's SQL also stops at the conversation deadline")
    max_rows: int = Field(10_000, ge=1, description="rows fetched per result; more marks the result truncated")
    max_result_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="bytes of one result held while it is read (text and bytes counted by length); rows past it are not read and the result is truncated")
    preview_rows: int = Field(5, ge=0, description="rows of each result kept in the journal")


class EmbeddedConfig(StrictModel):
    data_dir: ResolvedPath | None = Field(None, description="data directory (default: ~/.cache/evalbench/pgdata)")


class RunnersConfig(StrictModel):
    """Threads per stage (EvalBench's `runners` keys)."""

    promptgen_runners: int = Field(2, ge=1, description="prompt stage threads")
    sqlgen_runners: int = Field(8, ge=1, description="generate stage threads: agent turns in flight at once")
    vuser_runners: int = Field(4, ge=1, description="virtual-user stage threads")
    sqlexec_runners: int = Field(4, ge=1, description="execute stage threads, and connections per database")
    scoring_runners: int = Field(2, ge=1, description="score stage threads")
    eval_runners: int | None = Field(None, ge=1, description="EvalBench key (databases evaluated at once); not applied")

    NOT_APPLIED: ClassVar[dict[str, str]] = {
        "eval_runners": "databases are provisioned in parallel up to a fixed bound and their conversations share the stage pools",
    }


class CsvReportingConfig(StrictModel):
    output_directory: ResolvedPath = Field(Path("results"), description="run directories go in <output_directory>/<run_id>")


class ReportingConfig(StrictModel):
    csv: CsvReportingConfig = CsvReportingConfig()
    truncate_execution_outputs: int | None = Field(
        None, ge=0, description="EvalBench key: rows of each result kept in the outputs (sets execution.preview_rows unless given)")
    bigquery: dict[str, object] | None = Field(None, description="EvalBench key (results to BigQuery); not applied")

    NOT_APPLIED: ClassVar[dict[str, str]] = {
        "bigquery": "results are not written to BigQuery; load the run directory's CSV files (docs/evalbench_csv.md)",
    }


_DATASET_FORMATS = {
    "bird-interact": "bird-interact",
    "bird-interact-jsonl": "bird-interact",
    "bird-interact-format": "bird-interact",
    "evalbench": "evalbench",
    "evalbench-json": "evalbench",
    "evalbench-standard-format": "evalbench",
}


def _normalise_dataset_format(value: object) -> object:
    if isinstance(value, str) and value in _DATASET_FORMATS:
        return _DATASET_FORMATS[value]
    return value


def _valid_shard(value: str | None) -> str | None:
    from evalbench.dataset.shard import parse_shard

    return None if value is None else str(parse_shard(value))


class SubsetConfig(StrictModel):
    """Which items of the dataset run (after `dialects` and `query_types`). Applied in this order:
    `item_ids`, then `sample`, then `limit`; a subset may change when a run is resumed."""

    item_ids: list[str] | None = Field(None, description="only these item ids (any dialect); an unknown id is an error")
    sample: int | None = Field(None, ge=1, description="a seeded random sample of N items (the run seed), stratified by category")
    limit: int | None = Field(None, ge=1, description="the first N items, in dataset order")
    shard: Annotated[str | None, AfterValidator(_valid_shard)] = Field(
        None, description="i/n: this run is shard i of n (whole databases per shard, else items by hash), before item_ids, "
                          "sample and limit; `evalbench merge` joins the shards' run directories")


def _default_scorers() -> dict[str, dict[str, object] | None]:
    return {"exec_match": {}, "executable": {}, "turn_count": {}}


class RunConfig(StrictModel):
    """A run: which dataset, which databases, which agent and virtual user, which scorers."""

    dataset_config: ExistingPath = Field(description="the dataset file (EvalBench JSON or BIRD-Interact JSONL)")
    dataset_format: Annotated[Literal["auto", "bird-interact", "evalbench"], BeforeValidator(_normalise_dataset_format)] = Field(
        "auto", description="auto-detected from the first record; EvalBench's names are accepted"
    )
    database_configs: list[DatabaseConfig] = Field(
        default_factory=list, description="db config files (or mappings); a database with none uses the embedded server"
    )
    dialects: list[Dialect] = Field(default_factory=lambda: ["postgres"], description="dialects to evaluate (EvalBench's postgresql is postgres)")
    dataset_directory: ExistingPath | None = Field(
        None, description="EvalBench key: folder of <database>/<database>_kb.jsonl (and _schema.txt); its knowledge is read "
        "when knowledge_directory is not given")
    prompt_generator: str | None = Field(
        None, description="EvalBench key: recorded; our agents build their own prompt (NOOPGenerator: the user's words as they are)")
    follow_up: bool | None = Field(
        None, description="ask the item's follow-up question after a solved main phase (default: true; false with orchestrator: dataagent)")
    query_types: list[str] | None = Field(None, description="keep only these query types (dql, dml, ddl)")
    orchestrator: str = Field("interact", description="EvalBench's flow: interact, dataagent (no follow-up phase) or oneshot")
    agent: Annotated[AgentConfig, BeforeValidator(agent_shorthand)] = Field(
        alias="model_config", description="the agent under test: a file, a mapping, or a name such as simulated:oracle"
    )
    vuser: Annotated[VUserConfig, BeforeValidator(vuser_shorthand)] = Field(
        default_factory=RulesVUserConfig, alias="vuser_model_config", description="the virtual user: a file, a mapping or a name"
    )
    setup_directory: ExistingPath | None = Field(
        None, description="EvalBench-style folder: <database>/<dialect>/{pre_setup,setup,post_setup}.sql, <database>/data/*.csv"
    )
    knowledge_directory: ExistingPath | None = Field(
        None, description="folder of <database>_kb.jsonl files (default: knowledge/ beside the dataset, if present)"
    )
    scorers: dict[str, dict[str, object] | None] = Field(
        default_factory=_default_scorers,
        description="scorer name -> options (see docs/scoring.md)",
    )
    primary: dict[str, str | list[str]] | None = Field(
        None, description="category (Query, Management, or e.g. Query/follow_up) -> the scorer, or list of scorers "
        "(the first that applies), deciding success; default Query: exec_match, Management: [test_cases, state_match]",
    )
    accept_nl_answers: bool = Field(
        False, description="a question answered in words (no SQL) is judged by answer_match and counts towards success"
    )
    serve: ServeConfig | None = Field(None, description="serve the agent under test the harness's tools, user simulator "
                                      "and database logins during each conversation (docs/agents.md#bring-your-own-agent)")
    reporting: ReportingConfig = Field(ReportingConfig(), description="where run directories go")
    runners: RunnersConfig = Field(RunnersConfig(), description="threads per stage")
    execution: ExecutionConfig = Field(ExecutionConfig(), description="limits on every SQL execution")
    embedded: EmbeddedConfig = Field(EmbeddedConfig(), description="the embedded PostgreSQL")
    seed: int = Field(0, description="run seed; each conversation's seed derives from it and the item id")
    trials: int = Field(1, ge=1, le=1000, validation_alias=AliasChoices("trials", "num_trials"), description="conversations per item, each in an independent agent session "
                        "(pass@k, pass^k and per-item consistency in the summary)")
    subset: SubsetConfig | None = Field(None, description="run only some items: shard, item_ids, sample, limit (--shard, --item-ids, --sample, --limit)")
    max_turns: int = Field(30, ge=1, validation_alias=AliasChoices("max_turns", "max_turn"),
                           description="hard cap on turns per conversation, all phases together (EvalBench: max_turn)")
    debug_attempts: int = Field(
        0, ge=0, description="after a wrong answer the user says so and the agent may try again (BIRD-Interact: 1)"
    )
    max_in_flight: int = Field(64, ge=1, description="conversations in flight at once (bounds memory)")
    conversation_timeout_s: float = Field(600.0, gt=0, description="wall-clock budget of one conversation, from its admission: every wait (agent HTTP, SQL, virtual user, scoring) ends by it")
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict, description="model -> {input: USD per 1M tokens, output: USD per 1M tokens}, over the "
        "built-in prices (docs/configuration.md#prices); a model with no price has its cost unknown, never 0")
    run_id: str | None = Field(None, description="name of the run directory (default: timestamp + config name)")
    source: Path | None = Field(None, exclude=True, description="the config file this was read from")
    resolved_paths: list[dict[str, str]] = Field(default_factory=list, exclude=True, description="how each relative path was resolved")

    NOT_APPLIED: ClassVar[dict[str, str]] = {
        "prompt_generator": "our agents build their own prompt: adk and the simulated agents get the user's words as they are "
                            "(EvalBench's NOOPGenerator), gemini and openai_compat their system_prompt file",
    }

    @model_validator(mode="before")
    @classmethod
    def _evalbench_keys(cls, data: object) -> object:
        """EvalBench run-config keys that are not fields (evalbench/config/compat.py)."""
        if not isinstance(data, dict):
            return data
        refused = rejected_run_key(data)
        if refused is not None:
            raise ValueError(refused[1])
        for evalbench_key, ours in (("max_turn", "max_turns"), ("num_trials", "trials")):
            if evalbench_key in data and ours in data:
                raise ValueError(f"{evalbench_key} is EvalBench's name of {ours}: keep one")
        data = dict(data)
        if "num_evals_to_run" in data:  # EvalBench: the first N items (dataset/dataset.py::load_bird_interact_dataset)
            limit = data.pop("num_evals_to_run")
            if limit:
                subset = dict(data.get("subset") or {})
                if subset.get("limit") not in (None, limit):
                    raise ValueError("num_evals_to_run is EvalBench's name of subset.limit: keep one")
                data["subset"] = subset | {"limit": limit}
        if isinstance(data.get("scorers"), dict):
            data["scorers"] = scorer_aliases(data["scorers"])
        return data

    @field_validator("orchestrator")
    @classmethod
    def _known_orchestrator(cls, value: str) -> str:
        if value not in ORCHESTRATORS:
            raise ValueError(f"unknown orchestrator {value!r}: this harness runs data-agent conversations "
                             f"({', '.join(ORCHESTRATORS)})")
        return value

    @model_validator(mode="after")
    def _truncate_outputs(self) -> RunConfig:
        rows = self.reporting.truncate_execution_outputs
        if rows is not None and "preview_rows" not in self.execution.model_fields_set:
            object.__setattr__(self, "execution", self.execution.model_copy(update={"preview_rows": rows}))
        return self

    @model_validator(mode="after")
    def _served_names(self) -> RunConfig:
        """An agent template naming what the harness serves needs ``serve:`` (and, for a login, its credentials)."""
        used: set[str] = set()
        for key in ("session_state", "state_each_turn", "request", "messages"):
            used |= placeholders(getattr(self.agent, key, None))
        served = sorted(used & set(SERVED_NAMES))
        if served and self.serve is None:
            raise ValueError(f"the agent's templates name {{{served[0]}}}, which the harness serves: add a serve: section")
        logins = [name for name in served if name.startswith("db_")]
        if logins and self.serve is not None and not self.serve.db_logins:
            raise ValueError(f"the agent's templates name {{{logins[0]}}}: set serve.db_logins: true")
        return self

    @property
    def follow_up_enabled(self) -> bool:
        """EvalBench's data-agent flow has no follow-up phase (evaluator/dataagentevaluator.py::interact_loop)."""
        return self.follow_up if self.follow_up is not None else self.orchestrator != "dataagent"

    def compat_notes(self) -> list[dict[str, str]]:
        """EvalBench keys of this config that are accepted and not applied (also in the manifest)."""
        notes = compat_notes(self)
        if self.prompt_generator == "NOOPGenerator" and self.agent.agent not in ("gemini", "openai_compat"):
            notes = [n for n in notes if n["key"] != "prompt_generator"]  # what the agent gets anyway
        return notes

    @field_validator("scorers")
    @classmethod
    def _known_scorers(cls, value: dict[str, dict[str, object] | None], info: ValidationInfo) -> dict[str, dict[str, object] | None]:
        for name, options in value.items():
            problem = scorer_problem(name, options)  # unknown, or a plugin that does not load
            if problem is not None:
                raise ValueError(problem)
        if not value:
            raise ValueError("at least one scorer is needed")
        # scorer options that name a file (``prompt_file``) are relative to the config file
        base = (info.context or {}).get("base_dir")
        if base is not None:
            value = {name: resolve_files(options, Path(base)) for name, options in value.items()}
        return value

    @field_validator("primary")
    @classmethod
    def _known_primary(cls, value: dict[str, object] | None) -> dict[str, object] | None:
        for key, names in parse_primary(value).items():
            for name in names:
                if name not in SCORERS:
                    raise ValueError(f"primary.{key}: unknown scorer {name!r} (known: {', '.join(SCORERS.names())})")
        return value

    @field_validator("database_configs")
    @classmethod
    def _unique_databases(cls, value: list[DatabaseConfig]) -> list[DatabaseConfig]:
        names = [(db.dialect, db.database_name) for db in value]
        duplicates = sorted({f"{d}/{n}" for d, n in names if names.count((d, n)) > 1})
        if duplicates:
            raise ValueError(f"database configured more than once: {', '.join(duplicates)}")
        return value

    @property
    def knowledge_path(self) -> Path | None:
        if self.knowledge_directory is not None:
            return self.knowledge_directory
        if self.dataset_directory is not None:  # EvalBench's <dataset_directory>/<db>/<db>_kb.jsonl
            return self.dataset_directory
        default = self.dataset_config.parent / "knowledge"
        return default if default.is_dir() else None

    def database_for(self, dialect: str, database: str) -> DatabaseConfig:
        """The configured database, or the embedded default for a database with no config."""
        return database_for(self.database_configs, dialect, database)

    def snapshot(self) -> dict[str, object]:
        """A JSON-able copy for the manifest, with every secret redacted."""
        data: dict[str, object] = redact(json.loads(self.model_dump_json(by_alias=True)))
        data["evalbench_compat"] = {"not_applied": self.compat_notes(), "paths": self.resolved_paths,
                                    "follow_up": self.follow_up_enabled}
        return data

    def fingerprint(self) -> str:
        """Hash of the settings that make two runs comparable (used by resume and compare)."""
        data = self.snapshot()
        # prices decide what a run cost, not its verdicts
        for volatile in ("run_id", "runners", "max_in_flight", "reporting", "subset", "evalbench_compat", "prices"):
            data.pop(volatile, None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


