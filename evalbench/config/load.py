"""Reading a run config: YAML with nested config files, validated, with errors that name the file, line and key."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TypeVar

from pydantic import (
    ValidationError,
)
from pydantic_core import ErrorDetails

from evalbench.config.agents import (
    AdkAgentConfig,
    AgentConfig,
    GeminiAgentConfig,
    OpenAICompatAgentConfig,
    SimulatedAgentConfig,
    agent_shorthand,
)
from evalbench.config.compat import (
    llmrater_model,
    rejected_run_key,
    scorer_aliases,
)
from evalbench.config.databases import DatabaseConfig
from evalbench.config.plugins import scorer_problem
from evalbench.config.run import RunConfig
from evalbench.config.types import (
    RESOLVED_PATHS,
    StrictModel,
    resolve_relative,
)
from evalbench.config.vusers import LlmVUserConfig, VUserConfig, vuser_shorthand
from evalbench.config.yamlfile import KeyPath, YamlDocument, format_key_path, load_yaml
from evalbench.core.errors import ConfigError
from evalbench.core.redaction import redact_text, remember_secrets, secret_path

log = logging.getLogger(__name__)

M = TypeVar("M", bound=StrictModel)



# --------------------------------------------------------------------------- loading


def load_run_config(path: str | Path, **overrides: object) -> RunConfig:
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
    token = RESOLVED_PATHS.set(resolved)
    try:
        config = _load_run_config(doc, data, base, path)
    finally:
        RESOLVED_PATHS.reset(token)
    config = config.model_copy(update={"resolved_paths": resolved})
    from_cwd = [f"{r['key']}={r['given']}" for r in resolved if r["relative_to"] == "working directory"]
    if from_cwd:  # shown without -v; each path's choice is in manifest.json (config.evalbench_compat.paths)
        log.warning("%s: not beside the config file, read from the working directory %s (as EvalBench does): %s",
                    path, Path.cwd(), ", ".join(from_cwd))
    for note in config.compat_notes():
        log.warning("%s: %s: EvalBench key accepted, not applied: %s", path, note["key"], note["note"])
    return config


def _evalbench_run_keys(doc: YamlDocument, data: dict[str, object]) -> dict[str, object]:
    """EvalBench's run-config spellings refused or renamed before validation, errors at their line."""
    refused = rejected_run_key(data)
    if refused is not None:
        raise doc.error(refused[1], (refused[0],))
    if "simulated_user_model_config" in data:  # EvalBench's name of the model simulating the user
        if "vuser_model_config" in data:
            raise doc.error("simulated_user_model_config is EvalBench's name of vuser_model_config: keep one",
                            ("simulated_user_model_config",))
        data["vuser_model_config"] = data.pop("simulated_user_model_config")
    scorers = data.get("scorers")
    if isinstance(scorers, dict):
        try:
            data["scorers"] = scorer_aliases(scorers)
        except ValueError as exc:
            raise doc.error(str(exc), ("scorers",)) from None
    return data


def _load_run_config(doc: YamlDocument, data: dict[str, object], base: Path, path: Path) -> RunConfig:
    scorers = data.get("scorers")
    if isinstance(scorers, dict) and isinstance(scorers.get("llmrater"), dict) and "model_config" in scorers["llmrater"]:
        data["scorers"] = scorers = dict(scorers) | {"llmrater": _llmrater_model(doc, scorers["llmrater"], base)}
    if isinstance(scorers, dict):
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
    for key, shorthand in (("model_config", agent_shorthand), ("vuser_model_config", vuser_shorthand)):
        if key in data:
            try:
                entry = shorthand(data[key])
            except ValueError as exc:  # an EvalBench generator we refuse
                raise doc.error(str(exc), (key,)) from None
            data[key] = _load_nested(doc, (key,), entry, base, None)
        if key == "model_config" and _same_model_simulates_user(data):
            # EvalBench's interact flow answers with model_config's model (evaluator/virtualuser.py::VUser)
            data["vuser_model_config"] = dict(_mapping(data["model_config"]))
            log.info("vuser_model_config: not given; the user is simulated by model_config's model, as EvalBench's "
                     "interact orchestrator does")
    data["source"] = path
    return _validate(doc, RunConfig, data, base)


def _same_model_simulates_user(data: dict[str, object]) -> bool:
    """EvalBench's interact orchestrator with a Gemini model_config and no vuser_model_config."""
    model = data.get("model_config")
    return ("vuser_model_config" not in data and data.get("orchestrator", "interact") == "interact"
            and isinstance(model, dict) and model.get("generator") in ("gcp_vertex_gemini", "gemini"))


def _llmrater_model(doc: YamlDocument, options: dict[str, object], base: Path) -> dict[str, object]:
    """EvalBench's ``llmrater: {model_config: <model yaml>}``: the judge's model read from that file."""
    options = dict(options)
    entry = options.pop("model_config")
    key = ("scorers", "llmrater", "model_config")
    if not isinstance(entry, str):
        raise doc.error("expected the path of an EvalBench model config (generator: gcp_vertex_gemini)", key)
    model_path = resolve_relative(Path(entry), base, "scorers.llmrater.model_config", RESOLVED_PATHS.get())
    if not model_path.is_file():
        raise doc.error(f"file not found: {model_path}", key)
    try:
        return llmrater_model(dict(load_yaml(model_path).data)) | options
    except ValueError as exc:
        raise doc.error(str(exc), key) from None


def _load_nested(doc: YamlDocument, key_path: KeyPath, entry: object, base: Path, model: type[StrictModel] | None) -> object:
    """A nested config given as a file path is read (and validated, when ``model`` is given) there."""
    if isinstance(entry, str):
        if "://" in entry:  # never echo it: a URL may carry a password
            raise doc.error("expected a config file path or a mapping, got a URL (write it as `url:` in a database config)", key_path)
        nested_path = resolve_relative(Path(entry), base, format_key_path(key_path), RESOLVED_PATHS.get())
        if not nested_path.exists():
            raise doc.error(f"file not found: {nested_path}", key_path)
        nested = load_yaml(nested_path)
        if model is None:
            return _NestedFile(nested)
        return _validate(nested, model, nested.data, nested_path.parent)
    if model is not None and isinstance(entry, dict):
        return _validate_part(doc, model, entry, base, key_path)
    return entry


def _mapping(value: object) -> dict[str, object]:
    """``value`` when it is a mapping (checked before), else empty."""
    return value if isinstance(value, dict) else {}


class _NestedFile(dict[str, object]):
    """A mapping read from another file; validation errors inside it name that file."""

    def __init__(self, doc: YamlDocument) -> None:
        super().__init__(doc.data)
        self.doc = doc


def _validate(doc: YamlDocument, model: type[M], data: dict[str, object], base: Path) -> M:
    return _validate_part(doc, model, data, base, ())


def _validate_part(doc: YamlDocument, model: type[M], data: object, base: Path, prefix: KeyPath) -> M:
    try:
        return model.model_validate(data, context={"base_dir": base, "paths": RESOLVED_PATHS.get()})
    except ValidationError as exc:
        raise _config_error(doc, exc, prefix, data) from None


def _config_error(doc: YamlDocument, exc: ValidationError, prefix: KeyPath, data: object) -> ConfigError:
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


def _locate(doc: YamlDocument, data: object, prefix: KeyPath, loc: KeyPath) -> tuple[YamlDocument, KeyPath]:
    """Map a pydantic error location to (file, key path), following nested files and aliases."""
    key_path: list[str | int] = list(prefix)
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


def _describe(err: ErrorDetails, *, show_input: bool = True) -> str:
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

