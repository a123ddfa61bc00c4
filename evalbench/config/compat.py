"""Google EvalBench's config keys that are not fields of our models: translated, or refused.

EvalBench reads its configs as plain dicts (``util/config.py::load_yaml_config``), so its stock
configs carry keys that only some of its modules read. Each such key is handled here with the
meaning EvalBench's code gives it, or refused with a message naming the key and what to write
instead; keys accepted but not applied are fields of the models (listed in ``NOT_APPLIED``) and
are reported by :func:`compat_notes`. The table of every key is ``docs/evalbench_compat.md``.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from pydantic import BaseModel

log = logging.getLogger(__name__)

# Run config keys EvalBench reads that we refuse: key -> what to use instead.
REJECTED_RUN_KEYS = {
    "databases": "EvalBench's filter by database is not supported; use subset: {item_ids: [...]} "
                 "(or --item-ids), or a dataset file holding only those databases",
    "scenarios": "scenario datasets (EvalBench's CLI-agent evaluations) are not data-agent datasets; "
                 "use a BIRD-Interact or EvalBench standard-format dataset",
    "scenario_pattern": "scenario datasets (EvalBench's CLI-agent evaluations) are not data-agent datasets; "
                        "use a BIRD-Interact or EvalBench standard-format dataset",
}

# EvalBench scorer names that are ours under another name (scorers/score.py of EvalBench).
# (exact_match has EvalBench's meaning, ordered equality of the execution results: see
# evalbench/scoring/sql_text.py; the normalised SQL text comparison is sql_exact_match.)
SCORER_ALIASES = {"executable_sql": "executable"}

# EvalBench `generator:` values we cannot run, with what to use instead.
REJECTED_GENERATORS = {
    "query_data_api": "the Gemini Data Analytics QueryData API is not an adapter here; serve the agent with ADK "
                      "(generator: querydata / agent: adk) or call a model directly (agent: gemini)",
    "gcp_vertex_claude": "Claude on Vertex AI is not an adapter here; use agent: openai_compat with an "
                         "OpenAI-compatible endpoint, or agent: gemini",
    "noop": "EvalBench's noop generator returns no SQL; use model_config: simulated:oracle to try the harness",
}

# EvalBench's orchestrators we reproduce (evaluator/__init__.py::get_orchestrator of EvalBench).
ORCHESTRATORS = {
    "interact": "BIRD-Interact's flow: clarifications, then the follow-up phase when the item has one",
    "dataagent": "EvalBench's data-agent flow (evaluator/dataagentevaluator.py): clarifications, no follow-up phase",
    "oneshot": "EvalBench's one-shot flow: conversations as for interact (a one-shot agent just answers at once)",
}


def rejected_run_key(data: dict[str, object]) -> tuple[str, str] | None:
    """The first refused EvalBench key present in a run config mapping, with its message."""
    for key, instead in REJECTED_RUN_KEYS.items():
        if key in data:
            return key, f"EvalBench key {key!r} is not supported: {instead}"
    return None


def scorer_aliases(scorers: dict[str, object]) -> dict[str, object]:
    """``scorers`` with EvalBench's names replaced by ours; a ValueError when both are given."""
    out: dict[str, object] = {}
    for name, options in scorers.items():
        ours = SCORER_ALIASES.get(name, name)
        if ours in out:
            raise ValueError(f"scorer {name!r} is EvalBench's name of {ours!r}, which is configured too: keep one")
        out[ours] = options
    return out


def database_path(value: str, db_type: str) -> dict[str, object]:
    """EvalBench's ``database_path`` of a PostgreSQL server (``databases/postgres.py::PGDB``: the
    host part of the SQLAlchemy URL, ``host`` or ``host:port``), as our ``host`` / ``port`` keys.
    A directory (``/run/postgresql``) is a Unix socket directory, as libpq reads a host.
    Cloud SQL / AlloyDB instance names need their connector, which we do not ship: refused."""
    path = value.strip()
    if path.startswith("projects/") or path.count(":") >= 2:
        proxy = "AlloyDB Auth Proxy" if db_type == "alloydb" or path.startswith("projects/") else "Cloud SQL Auth Proxy"
        kind = "alloydb" if "Alloy" in proxy else "cloudsql"
        raise ValueError(f"database_path {path!r} names a cloud instance, which needs its connector: set db_type: {kind} "
                         f"(pip install 'evalbench[{kind}]'), or run the {proxy} and write database_path: 127.0.0.1:5432")
    if path.startswith("/"):  # a socket directory goes in the URL's query, where libpq reads it
        if db_type in ("mysql", "mariadb"):
            raise ValueError(f"database_path {path!r}: a MySQL server is reached at host or host:port here "
                             "(write database_path: 127.0.0.1:3306)")
        return {"url": f"postgresql:///postgres?host={quote(path, safe='/')}"}
    host, _, port = path.rpartition(":") if ":" in path else (path, "", "")
    if not host or (port and not port.isdigit()):
        raise ValueError(f"database_path {path!r}: expected host or host:port of a PostgreSQL server")
    return {"host": host, "port": int(port)} if port else {"host": host}


def gcp_defaults(data: dict[str, object]) -> dict[str, object]:
    """EvalBench's Gemini settings (``generators/models/gemini.py``): Vertex AI always, project
    and region from ``gcp_project_id`` / ``gcp_region`` or the environment variables
    EVAL_GCP_PROJECT_ID / EVAL_GCP_PROJECT_REGION (``util/gcp.py``), as our keys."""
    data = dict(data)
    for evalbench_key, ours, env in (("gcp_project_id", "project_id", "EVAL_GCP_PROJECT_ID"),
                                     ("gcp_region", "region", "EVAL_GCP_PROJECT_REGION")):
        value = data.pop(evalbench_key, None)
        if value not in (None, "") and data.get(ours) not in (None, "") and data.get(ours) != value:
            raise ValueError(f"{evalbench_key} and {ours} name the same setting: keep one")
        if value in (None, ""):
            value = os.environ.get(env) or None
        if value is not None and data.get(ours) in (None, ""):
            data[ours] = value
    if "base_url" not in data:  # a local endpoint (a proxy, a fake) is the Gemini API, not Vertex AI
        data.setdefault("vertexai", True)
    return data


def max_attempts(data: dict[str, object]) -> dict[str, object]:
    """EvalBench's ``max_attempts`` (``util/rate_limit.py``: attempts of a rate-limited call) as
    our ``retry.max_retries`` (= attempts - 1)."""
    if "max_attempts" not in data:
        return data
    data = dict(data)
    attempts = data.pop("max_attempts")
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
        raise ValueError(f"max_attempts: expected an integer of at least 1 (got {attempts!r})")
    given = data.get("retry") or {}
    if not isinstance(given, dict):
        raise ValueError(f"retry: expected a mapping (got {given!r})")
    retry = dict(given)
    retry.setdefault("max_retries", attempts - 1)
    data["retry"] = retry
    return data


def llmrater_model(model: dict[str, object]) -> dict[str, object]:
    """An EvalBench model config given as ``scorers.llmrater.model_config`` (a gcp_vertex_gemini
    generator, scorers/llmrater.py of EvalBench) as our llmrater options."""
    generator = model.get("generator")
    if generator not in ("gcp_vertex_gemini", "gemini"):
        raise ValueError(f"llmrater: model_config generator {generator!r}: the judge is a Gemini model (gcp_vertex_gemini)")
    for unused in ("base_prompt", "max_tokens"):  # our judge has its own prompt file and output cap
        if model.get(unused) not in (None, ""):
            log.warning("scorers.llmrater.model_config: %s is not applied (the judge's prompt is its prompt_file)", unused)
    options = gcp_defaults({k: v for k, v in model.items() if k not in ("generator", "base_prompt", "max_tokens")})
    if "max_attempts" in options:
        attempts = options.pop("max_attempts")
        if not isinstance(attempts, (int, float, str)):
            raise ValueError(f"llmrater: model_config max_attempts: expected an integer (got {attempts!r})")
        options["max_retries"] = max(0, int(attempts) - 1)
    return options


def compat_notes(model: BaseModel, prefix: str = "") -> list[dict[str, str]]:
    """EvalBench keys set in ``model`` (and its nested models) that are accepted and not applied:
    ``{"key", "note"}`` each, for the manifest and a warning."""
    from pydantic import BaseModel

    notes: list[dict[str, str]] = []
    not_applied: dict[str, str] = getattr(type(model), "NOT_APPLIED", {})
    for name in sorted(model.model_fields_set):
        field = type(model).model_fields.get(name)
        key = (field.alias if field is not None and field.alias else name)
        value = getattr(model, name, None)
        if name in not_applied and value not in (None, "", {}, []):
            notes.append({"key": f"{prefix}{key}", "note": not_applied[name]})
        children = value if isinstance(value, list) else [value]
        for i, child in enumerate(children):
            if isinstance(child, BaseModel):
                where = f"{prefix}{key}[{i}]." if isinstance(value, list) else f"{prefix}{key}."
                notes += compat_notes(child, where)
    return notes
