"""Building blocks of the config models: strict models and paths relative to the config file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, protected_namespaces=())


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    base = (info.context or {}).get("base_dir")
    if base is not None and not value.is_absolute():
        value = Path(os.path.normpath(Path(base) / value))  # configs/../results -> results
    return value


def _existing_path(value: Path, info: ValidationInfo) -> Path:
    value = _resolve_path(value, info)
    if not value.exists():
        raise ValueError(f"path does not exist: {value}")
    return value


ResolvedPath = Annotated[Path, AfterValidator(_resolve_path)]


class GenaiClientOptions(StrictModel):
    """Where a google-genai client connects (evalbench/genai_client.py): the gemini agent, the
    llm virtual user and the llmrater judge share these settings."""

    api_key_env: str = Field("GEMINI_API_KEY", description="environment variable holding the API key (Gemini Developer API)")
    vertexai: bool = Field(False, description="use Vertex AI (project and location, application default credentials)")
    project: str | None = Field(None, alias="project_id", description="Vertex AI project (default: GOOGLE_CLOUD_PROJECT)")
    location: str | None = Field(None, alias="region", description="Vertex AI location (default: GOOGLE_CLOUD_LOCATION)")
    base_url: str | None = Field(None, description="override of the API endpoint (a proxy, or a local fake in tests)")
ExistingPath = Annotated[Path, AfterValidator(_existing_path)]
