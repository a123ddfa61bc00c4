"""Building blocks of the config models: strict models and paths relative to the config file."""

from __future__ import annotations

import logging
import os
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo

log = logging.getLogger(__name__)
# The relative paths resolved while one run config loads (recorded in the manifest).
RESOLVED_PATHS: ContextVar[list[dict[str, str]] | None] = ContextVar("evalbench_config_paths", default=None)


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, protected_namespaces=())


def resolve_relative(value: Path, base: Path | None, key: str, resolved: list[dict[str, str]] | None) -> Path:
    """A relative path from a config file: beside the config file when it exists there, else in the
    working directory when it exists there (EvalBench reads every path from the working
    directory), else beside the config file. Each choice is appended to ``resolved``."""
    if base is None or value.is_absolute():
        return value
    beside = Path(os.path.normpath(Path(base) / value))  # configs/../results -> results
    chosen, where = beside, "config file folder"
    if not beside.exists():
        cwd = Path(os.path.normpath(Path.cwd() / value))
        if cwd.exists():
            chosen, where = cwd, "working directory"
            log.debug("%s: %s is not beside the config file; using %s (working directory, as EvalBench does)", key, value, cwd)
    if resolved is not None:
        resolved.append({"key": key, "given": str(value), "resolved": str(chosen), "relative_to": where})
    return chosen


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    context = info.context or {}
    return resolve_relative(value, context.get("base_dir"), info.field_name or "path", context.get("paths"))


def _existing_path(value: Path, info: ValidationInfo) -> Path:
    value = _resolve_path(value, info)
    if not value.exists():
        raise ValueError(f"path does not exist: {value} (nor in the working directory)")
    return value


ResolvedPath = Annotated[Path, AfterValidator(_resolve_path)]


class GenaiClientOptions(StrictModel):
    """Where a google-genai client connects (evalbench/clients/genai.py): the gemini agent, the
    llm virtual user and the llmrater judge share these settings."""

    api_key_env: str = Field("GEMINI_API_KEY", description="environment variable holding the API key (Gemini Developer API)")
    vertexai: bool = Field(False, description="use Vertex AI (project and location, application default credentials)")
    project: str | None = Field(None, alias="project_id", description="Vertex AI project (default: GOOGLE_CLOUD_PROJECT)")
    location: str | None = Field(None, alias="region", description="Vertex AI location (default: GOOGLE_CLOUD_LOCATION)")
    base_url: str | None = Field(None, description="override of the API endpoint (a proxy, or a local fake in tests)")
ExistingPath = Annotated[Path, AfterValidator(_existing_path)]

def resolve_files(options: dict[str, object] | None, base: Path) -> dict[str, object] | None:
    """Scorer options naming a file (``*_file``, EvalBench's ``model_config``): relative paths
    resolved beside the config file, else in the working directory."""
    if not isinstance(options, dict):
        return options
    return {key: str(resolve_relative(Path(value), base, f"scorers.{key}", RESOLVED_PATHS.get()))
            if (key.endswith("_file") or key == "model_config") and isinstance(value, str) else value
            for key, value in options.items()}
