"""Building blocks of the config models: strict models and paths relative to the config file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo


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
ExistingPath = Annotated[Path, AfterValidator(_existing_path)]
