"""Typed run, database, agent and virtual-user configuration.

The pydantic models below are the single source of truth for keys and defaults. They accept
Google EvalBench's run-config and db-config keys and add our own. Every model forbids unknown
keys; :func:`load_run_config` turns validation errors into messages that name the file, the
line and the key path. Paths are resolved relative to the file that names them.
"""

from __future__ import annotations

import hashlib
import json
import logging
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from evalbench.config_compat import (
    ORCHESTRATORS,
    compat_notes,
    database_path,
    gcp_defaults,
    llmrater_model,
    max_attempts,
    rejected_run_key,
    scorer_aliases,
)
from evalbench.config_types import (
    ExistingPath,
    GenaiClientOptions,
    ResolvedPath,
    StrictModel,
    resolve_relative,
)
from evalbench.dataset.formats import normalise_dialect
from evalbench.errors import ConfigError
from evalbench.plugin_config import PluginVUserConfig, discriminated
from evalbench.prices import ModelPrice
from evalbench.redaction import redact, redact_text, remember_secrets, secret_path
from evalbench.yamlfile import YamlDocument, format_key_path, load_yaml

log = logging.getLogger(__name__)
# The relative paths resolved while one run config loads (recorded in the manifest).
_PATHS: ContextVar[list[dict[str, str]] | None] = ContextVar("evalbench_config_paths", default=None)



# --------------------------------------------------------------------------- agents

from evalbench.config_agents import (  # noqa: E402  (the agent configs: part of the schema, no agent imported)
    AdkAgentConfig,
    AgentConfig,
    GeminiAgentConfig,
    OpenAICompatAgentConfig,
    RetryConfig,
    SimulatedAgentConfig,
    _agent_shorthand,
)

# --------------------------------------------------------------------------- virtual user


class RulesVUserConfig(StrictModel):
    """The offline, deterministic virtual user."""

    vuser: Literal["rules"] = Field("rules", description="the offline deterministic virtual user")
    patience: int = Field(3, ge=0, description="clarifications allowed beyond the number of annotated ambiguities")
    block_leaks: bool = Field(False, description="a reply that leaks the golden SQL is regenerated once, then recorded")


class LlmVUserConfig(GenaiClientOptions):
    """BIRD-Interact's two-stage virtual user with a Gemini model (EvalBench: vuser_model_config)."""

    vuser: Literal["llm"] = Field(description="llm (EvalBench: generator: gcp_vertex_gemini)")
    model: str = Field("gemini-2.5-flash", alias="vertex_model", description="the Gemini model")
    temperature: float = Field(0.0, ge=0, description="sampling temperature")
    seed: int | None = Field(None, description="sampling seed (default: the run seed)")
    patience: int = Field(3, ge=0, description="clarifications allowed beyond the number of annotated ambiguities")
    encode_prompt: ResolvedPath | None = Field(None, description="encode prompt file (default: prompts/vuser_encode.txt)")
    decode_prompt: ResolvedPath | None = Field(None, description="decode prompt file (default: prompts/vuser_decode.txt)")
    invalid_action_retries: int = Field(2, ge=0, description="new encode attempts after an invalid action, then vuser_error")
    block_leaks: bool = Field(False, description="a reply that leaks the golden SQL is regenerated once, then recorded")
    timeout_s: float = Field(60.0, gt=0, description="time one model call may take")
    execs_per_minute: float | None = Field(None, gt=0, description="rate limit of model calls")
    max_concurrency: int | None = Field(None, ge=1, description="model calls in flight at once")
    retry: RetryConfig = Field(RetryConfig(), description="retries of rate-limited or unavailable calls")
    base_prompt: str = Field("", description="EvalBench key: text put before every encode and decode prompt, as EvalBench's Gemini generator does")
    max_tokens: int | None = Field(None, description="EvalBench key; not applied (its Gemini generator does not read it either)")

    NOT_APPLIED: ClassVar[dict[str, str]] = {
        "max_tokens": "EvalBench's gcp_vertex_gemini generator does not read max_tokens either",
    }


class ReplayVUserConfig(StrictModel):
    """Replays the virtual user's answers recorded in a run's journal (what `evalbench rescore` uses)."""

    vuser: Literal["replay"] = Field(description="replay (needs the replay agent)")
    run_dir: ExistingPath | None = Field(None, description="the run whose virtual user is replayed (for the manifest)")
    patience: int = Field(3, ge=0, description="clarifications allowed beyond the number of annotated ambiguities")


# a name no built-in model declares is a plugin's (evalbench/plugin_config.py)
if TYPE_CHECKING:  # what a type checker sees; pydantic gets the tagged union
    VUserConfig = RulesVUserConfig | LlmVUserConfig | ReplayVUserConfig | PluginVUserConfig
else:
    VUserConfig = discriminated("vuser", [RulesVUserConfig, LlmVUserConfig, ReplayVUserConfig], PluginVUserConfig)


def _vuser_shorthand(value: Any) -> Any:
    """`vuser_model_config: rules` is shorthand for `{vuser: rules}`; an EvalBench model config
    (`generator: ...`) is the llm virtual user."""
    if isinstance(value, str) and not value.endswith((".yaml", ".yml")):
        return {"vuser": value}
    if isinstance(value, dict) and "generator" in value and "vuser" not in value:
        value = dict(value)
        generator = value.pop("generator")
        if generator not in ("gcp_vertex_gemini", "gemini"):
            raise ValueError(f"generator {generator!r}: the virtual user is a Gemini model (generator: gcp_vertex_gemini), "
                             "or vuser: rules")
        value = max_attempts(gcp_defaults(value))  # Vertex AI, gcp_project_id / gcp_region, as EvalBench reads them
        value["vuser"] = "llm"
    return value


# --------------------------------------------------------------------------- databases


def _normalise_db_type(value: Any) -> Any:
    """A backend's name (``postgresql`` is ``postgres``, ``mariadb`` is ``mysql``...); one no
    backend is registered under (built in, or an ``evalbench.backends`` entry point) is refused."""
    if not isinstance(value, str):
        return value
    from evalbench.backends.names import BACKENDS, backend_name

    name = backend_name(value, "")
    if name not in BACKENDS:
        raise ValueError(f"unknown db_type {value!r} (known: {', '.join(BACKENDS.names())})")
    return name


# Backends that reach a Google Cloud instance through its Python connector when given one.
CONNECTOR_BACKENDS = frozenset({"alloydb", "cloudsql"})


def is_instance_name(path: str) -> bool:
    """An AlloyDB instance URI (projects/...) or a Cloud SQL connection name (project:region:instance)."""
    return path.startswith("projects/") or path.count(":") >= 2


def _normalise_dialect(value: Any) -> Any:
    return normalise_dialect(value) if isinstance(value, str) else value


Dialect = Annotated[str, BeforeValidator(_normalise_dialect)]


class DatabaseConfig(StrictModel):
    """One database. EvalBench's db-config keys plus ours (``url``, ``embedded``, limits)."""

    db_type: Annotated[str | None, BeforeValidator(_normalise_db_type)] = Field(
        None, description="the backend: postgres, alloydb, cloudsql, sqlite, duckdb, mysql (mariadb), or a plugin's name; "
                          "default: the one named like the dialect (postgresql is accepted as postgres)"
    )
    dialect: Dialect = Field("postgres", description="the dialect of the items this database serves (postgresql is postgres)")
    database_name: str = Field(description="the database name, as items name it (selected_database / database)")
    database_path: str | None = Field(None, description="EvalBench key: host or host:port (or a socket directory) of the server, read as host and port; "
                                                         "for sqlite and duckdb the folder of the <database>.db files (or one file)")
    db_name_suffix: str = Field("", description="appended to each item's database name to name the database on the server")
    secret_manager_path: str | None = Field(None, description="EvalBench key; not applied (password, PGPASSWORD or ~/.pgpass is used)")
    gcp_project_id: str | None = Field(None, description="EvalBench key (AlloyDB connector); not applied")
    gcp_region: str | None = Field(None, description="EvalBench key (AlloyDB connector); not applied")
    nl_config: Any = Field(None, description="EvalBench key (AlloyDB AI natural language); not applied")
    user_name: str | None = Field(None, description="login of an external server")
    password: SecretStr | None = Field(None, description="its password (use ${ENV_VAR}); never written to outputs")
    host: str | None = Field(None, description="host of an external server")
    port: int | None = Field(None, description="port of an external server")
    url: SecretStr | None = Field(None, description="SQLAlchemy/libpq URL of an external server; overrides host/user keys")
    instance: str | None = Field(None, description="db_type alloydb: the instance URI (projects/P/locations/R/clusters/C/instances/I); "
                                                   "db_type cloudsql: the connection name (P:R:I); reached through Google's Python connector")
    ip_type: Literal["public", "private", "psc"] = Field("public", description="alloydb/cloudsql: which of the instance's IP addresses the connector uses")
    enable_iam_auth: bool = Field(False, description="alloydb/cloudsql: log in with IAM database authentication (no password)")
    embedded: bool | None = Field(None, description="use the embedded PostgreSQL (default when no url or host is given)")
    max_executions_per_minute: int | None = Field(None, ge=1, description="rate limit of SQL executions on this database")
    statement_timeout_s: float | None = Field(None, gt=0, description="overrides execution.statement_timeout_s")
    max_rows: int | None = Field(None, ge=1, description="overrides execution.max_rows")
    allow_destructive_setup: bool = Field(
        False, description="allow dropping and re-creating a database the harness did not create"
    )

    NOT_APPLIED: ClassVar[dict[str, str]] = {
        "secret_manager_path": "GCP Secret Manager is not read: write password: ${VAR}, or let libpq read PGPASSWORD / ~/.pgpass",
        "gcp_project_id": "the project is part of the instance URI (instance, or database_path)",
        "gcp_region": "the region is part of the instance URI (instance, or database_path)",
        "nl_config": "AlloyDB AI natural language is not used",
    }

    @model_validator(mode="before")
    @classmethod
    def _evalbench_keys(cls, data: Any) -> Any:
        """EvalBench's ``database_path`` of a PostgreSQL server is its host[:port] (databases/postgres.py::PGDB)."""
        if not isinstance(data, dict) or data.get("database_path") in (None, ""):
            return data
        from evalbench.backends.names import is_file_backend

        if is_file_backend(_normalise_db_type(data.get("db_type") or normalise_dialect(str(data.get("dialect") or "postgres")))):
            return data  # a folder or a file, read by the backend
        if data.get("host") is not None or data.get("url") is not None:
            raise ValueError("database_path (EvalBench's host:port) cannot be combined with host or url: keep one")
        data = dict(data)
        path = str(data["database_path"]).strip()
        if _normalise_db_type(data.get("db_type") or "postgres") in CONNECTOR_BACKENDS and is_instance_name(path):
            data.setdefault("instance", path)  # an instance the connector reaches (databases/alloydb.py::AlloyDB)
            return data
        data.update(database_path(path, str(data.get("db_type") or "postgres")))
        return data

    @model_validator(mode="after")
    def _check(self) -> DatabaseConfig:
        if self.embedded and (self.url is not None or self.host is not None or self.instance is not None):
            raise ValueError("embedded: true cannot be combined with url, host or instance")
        if self.instance is not None and self.backend not in CONNECTOR_BACKENDS:
            raise ValueError(f"instance is reached through Google's connector: set db_type: alloydb or cloudsql (not {self.backend})")
        return self

    @property
    def is_embedded(self) -> bool:
        return self.embedded if self.embedded is not None else (self.url is None and self.host is None and self.instance is None)

    @property
    def backend(self) -> str:
        """The name of the backend that serves this database."""
        from evalbench.backends.names import backend_name

        return backend_name(self.db_type, self.dialect)

    @property
    def serves_every_database(self) -> bool:
        """Names a server (or a folder of database files) holding every database of its dialect,
        as an EvalBench db config does (databases/__init__.py::get_database)."""
        from evalbench.backends.names import is_file_backend

        return not self.is_embedded or (self.database_path is not None and is_file_backend(self.backend))


# --------------------------------------------------------------------------- run


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
    bigquery: dict[str, Any] | None = Field(None, description="EvalBench key (results to BigQuery); not applied")

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


def _normalise_dataset_format(value: Any) -> Any:
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


def _default_scorers() -> dict[str, dict[str, Any] | None]:
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
    agent: Annotated[AgentConfig, BeforeValidator(_agent_shorthand)] = Field(
        alias="model_config", description="the agent under test: a file, a mapping, or a name such as simulated:oracle"
    )
    vuser: Annotated[VUserConfig, BeforeValidator(_vuser_shorthand)] = Field(
        default_factory=RulesVUserConfig, alias="vuser_model_config", description="the virtual user: a file, a mapping or a name"
    )
    setup_directory: ExistingPath | None = Field(
        None, description="EvalBench-style folder: <database>/<dialect>/{pre_setup,setup,post_setup}.sql, <database>/data/*.csv"
    )
    knowledge_directory: ExistingPath | None = Field(
        None, description="folder of <database>_kb.jsonl files (default: knowledge/ beside the dataset, if present)"
    )
    scorers: dict[str, dict[str, Any] | None] = Field(
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
    def _evalbench_keys(cls, data: Any) -> Any:
        """EvalBench run-config keys that are not fields (evalbench/config_compat.py)."""
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
    def _known_scorers(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        from evalbench.scoring import scorer_problem

        for name, options in value.items():
            problem = scorer_problem(name, options)  # unknown, or a plugin that does not load
            if problem is not None:
                raise ValueError(problem)
        if not value:
            raise ValueError("at least one scorer is needed")
        # scorer options that name a file (``prompt_file``) are relative to the config file
        base = (info.context or {}).get("base_dir")
        if base is not None:
            value = {name: _resolve_files(options, Path(base)) for name, options in value.items()}
        return value

    @field_validator("primary")
    @classmethod
    def _known_primary(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        from evalbench.scoring import SCORERS
        from evalbench.scoring.primary import parse_primary

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
        for db in self.database_configs:
            if db.database_name == database and db.dialect == dialect:
                return db.model_copy(update={"database_name": database + db.db_name_suffix}) if db.db_name_suffix else db
        for db in self.database_configs:
            # EvalBench's db config names a server that serves every database of its dialect
            # (databases/__init__.py::get_database replaces database_name by the item's database)
            if db.dialect == dialect and db.serves_every_database:
                return db.model_copy(update={"database_name": database + db.db_name_suffix})
        # a database with no config: the dialect's own backend, embedded (a file for sqlite...)
        return DatabaseConfig(database_name=database, dialect=dialect)

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able copy for the manifest, with every secret redacted."""
        data = redact(json.loads(self.model_dump_json(by_alias=True)))
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


def _resolve_files(options: Any, base: Path) -> Any:
    """Scorer options naming a file (``*_file``, EvalBench's ``model_config``): relative paths
    resolved beside the config file, else in the working directory."""
    if not isinstance(options, dict):
        return options
    return {key: str(resolve_relative(Path(value), base, f"scorers.{key}", _PATHS.get()))
            if (key.endswith("_file") or key == "model_config") and isinstance(value, str) else value
            for key, value in options.items()}


# --------------------------------------------------------------------------- loading


def load_run_config(path: str | Path, **overrides: Any) -> RunConfig:
    """Read and validate a run config. Nested config files (``database_configs``,
    ``model_config``, ``vuser_model_config`` given as paths) are read relative to it."""
    path = Path(path)
    doc = load_yaml(path)
    data = dict(doc.data)
    remember_secrets(overrides)  # before validation: no error message or log line shows them
    data.update(overrides)  # command-line --set values, validated like the file's own
    base = path.parent
    data = _evalbench_run_keys(doc, data)
    resolved: list[dict[str, str]] = []
    token = _PATHS.set(resolved)
    try:
        config = _load_run_config(doc, data, base, path)
    finally:
        _PATHS.reset(token)
    config = config.model_copy(update={"resolved_paths": resolved})
    from_cwd = [f"{r['key']}={r['given']}" for r in resolved if r["relative_to"] == "working directory"]
    if from_cwd:  # shown without -v; each path's choice is in manifest.json (config.evalbench_compat.paths)
        log.warning("%s: not beside the config file, read from the working directory %s (as EvalBench does): %s",
                    path, Path.cwd(), ", ".join(from_cwd))
    for note in config.compat_notes():
        log.warning("%s: %s: EvalBench key accepted, not applied: %s", path, note["key"], note["note"])
    return config


def _evalbench_run_keys(doc: YamlDocument, data: dict[str, Any]) -> dict[str, Any]:
    """EvalBench's run-config spellings refused or renamed before validation, errors at their line."""
    refused = rejected_run_key(data)
    if refused is not None:
        raise doc.error(refused[1], (refused[0],))
    if "simulated_user_model_config" in data:  # EvalBench's name of the model simulating the user
        if "vuser_model_config" in data:
            raise doc.error("simulated_user_model_config is EvalBench's name of vuser_model_config: keep one",
                            ("simulated_user_model_config",))
        data["vuser_model_config"] = data.pop("simulated_user_model_config")
    if isinstance(data.get("scorers"), dict):
        try:
            data["scorers"] = scorer_aliases(data["scorers"])
        except ValueError as exc:
            raise doc.error(str(exc), ("scorers",)) from None
    return data


def _load_run_config(doc: YamlDocument, data: dict[str, Any], base: Path, path: Path) -> RunConfig:
    scorers = data.get("scorers")
    if isinstance(scorers, dict) and isinstance(scorers.get("llmrater"), dict) and "model_config" in scorers["llmrater"]:
        data["scorers"] = scorers = dict(scorers) | {"llmrater": _llmrater_model(doc, scorers["llmrater"], base)}
    if isinstance(scorers, dict):
        from evalbench.scoring import scorer_problem

        for name, options in scorers.items():
            problem = scorer_problem(name, options if isinstance(options, dict) else None)
            if problem is not None:
                raise doc.error(problem, ("scorers", name))

    dbs = data.get("database_configs")
    if dbs is not None:
        if not isinstance(dbs, list):
            raise doc.error("expected a list of database config files or mappings", ("database_configs",))
        data["database_configs"] = [
            _load_nested(doc, ("database_configs", i), entry, base, DatabaseConfig) for i, entry in enumerate(dbs)
        ]
    for key, shorthand in (("model_config", _agent_shorthand), ("vuser_model_config", _vuser_shorthand)):
        if key in data:
            try:
                entry = shorthand(data[key])
            except ValueError as exc:  # an EvalBench generator we refuse
                raise doc.error(str(exc), (key,)) from None
            data[key] = _load_nested(doc, (key,), entry, base, None)
        if key == "model_config" and _same_model_simulates_user(data):
            # EvalBench's interact flow answers with model_config's model (evaluator/virtualuser.py::VUser)
            data["vuser_model_config"] = dict(data["model_config"])
            log.info("vuser_model_config: not given; the user is simulated by model_config's model, as EvalBench's "
                     "interact orchestrator does")
    data["source"] = path
    return _validate(doc, RunConfig, data, base)


def _same_model_simulates_user(data: dict[str, Any]) -> bool:
    """EvalBench's interact orchestrator with a Gemini model_config and no vuser_model_config."""
    model = data.get("model_config")
    return ("vuser_model_config" not in data and data.get("orchestrator", "interact") == "interact"
            and isinstance(model, dict) and model.get("generator") in ("gcp_vertex_gemini", "gemini"))


def _llmrater_model(doc: YamlDocument, options: dict[str, Any], base: Path) -> dict[str, Any]:
    """EvalBench's ``llmrater: {model_config: <model yaml>}``: the judge's model read from that file."""
    options = dict(options)
    entry = options.pop("model_config")
    key = ("scorers", "llmrater", "model_config")
    if not isinstance(entry, str):
        raise doc.error("expected the path of an EvalBench model config (generator: gcp_vertex_gemini)", key)
    model_path = resolve_relative(Path(entry), base, "scorers.llmrater.model_config", _PATHS.get())
    if not model_path.is_file():
        raise doc.error(f"file not found: {model_path}", key)
    try:
        return llmrater_model(dict(load_yaml(model_path).data)) | options
    except ValueError as exc:
        raise doc.error(str(exc), key) from None


def _load_nested(doc: YamlDocument, key_path: tuple[Any, ...], entry: Any, base: Path, model: type[StrictModel] | None) -> Any:
    """A nested config given as a file path is read (and validated, when ``model`` is given) there."""
    if isinstance(entry, str):
        if "://" in entry:  # never echo it: a URL may carry a password
            raise doc.error("expected a config file path or a mapping, got a URL (write it as `url:` in a database config)", key_path)
        nested_path = resolve_relative(Path(entry), base, format_key_path(key_path), _PATHS.get())
        if not nested_path.exists():
            raise doc.error(f"file not found: {nested_path}", key_path)
        nested = load_yaml(nested_path)
        if model is None:
            return _NestedFile(nested)
        return _validate(nested, model, nested.data, nested_path.parent)
    if model is not None and isinstance(entry, dict):
        return _validate_part(doc, model, entry, base, key_path)
    return entry


class _NestedFile(dict):
    """A mapping read from another file; validation errors inside it name that file."""

    def __init__(self, doc: YamlDocument) -> None:
        super().__init__(doc.data)
        self.doc = doc


def _validate(doc: YamlDocument, model: type[StrictModel], data: dict[str, Any], base: Path) -> Any:
    return _validate_part(doc, model, data, base, ())


def _validate_part(doc: YamlDocument, model: type[StrictModel], data: Any, base: Path, prefix: tuple[Any, ...]) -> Any:
    try:
        return model.model_validate(data, context={"base_dir": base, "paths": _PATHS.get()})
    except ValidationError as exc:
        raise _config_error(doc, exc, prefix, data) from None


def _config_error(doc: YamlDocument, exc: ValidationError, prefix: tuple[Any, ...], data: Any) -> ConfigError:
    messages = []
    first: ConfigError | None = None
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc += (str(err.get("ctx", {}).get("discriminator", "")).strip("'"),)  # point at `agent:` / `vuser:`
        target_doc, key_path = _locate(doc, data, prefix, loc)
        message = redact_text(_describe(err, show_input=not secret_path(key_path)))
        error = target_doc.error(message, key_path)
        first = first or error
        messages.append(str(error))
    assert first is not None
    if len(messages) > 1:
        first.args = ("\n".join(messages),)
    return first


def _locate(doc: YamlDocument, data: Any, prefix: tuple[Any, ...], loc: tuple[Any, ...]) -> tuple[YamlDocument, tuple[Any, ...]]:
    """Map a pydantic error location to (file, key path), following nested files and aliases."""
    key_path: list[Any] = list(prefix)
    node = data
    aliases = {"agent": "model_config", "vuser": "vuser_model_config"}
    for i, part in enumerate(loc):
        if i == 0 and not prefix and part in aliases and isinstance(node, dict) and aliases[part] in node:
            part = aliases[part]
        if isinstance(node, dict) and part not in node and isinstance(part, str) and i + 1 < len(loc):
            # discriminated unions add the tag as a location element; skip it
            continue
        if isinstance(node, _NestedFile):
            return _locate(node.doc, dict(node), (), loc[i:])
        key_path.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            node = None
        if isinstance(node, _NestedFile):
            return _locate(node.doc, dict(node), (), loc[i + 1 :])
    return doc, tuple(key_path)


def _describe(err: Any, *, show_input: bool = True) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    shown = err.get("input")
    if show_input and not isinstance(shown, (dict, list)) and shown is not None:
        return f"{msg} (got {shown!r})"
    return msg


__all__ = [
    "AdkAgentConfig",
    "AgentConfig",
    "DatabaseConfig",
    "GeminiAgentConfig",
    "LlmVUserConfig",
    "OpenAICompatAgentConfig",
    "RunConfig",
    "SimulatedAgentConfig",
    "VUserConfig",
    "format_key_path",
    "load_run_config",
]
