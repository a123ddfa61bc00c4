"""Reading YAML config files with line numbers and ``${ENV_VAR}`` substitution.

Errors must name the file, the line and the key path, so the loader keeps a map from
key path (a tuple of keys and list indexes) to the line where that value starts.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evalbench.errors import ConfigError

KeyPath = tuple[Any, ...]

_ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


@dataclass
class YamlDocument:
    """A parsed YAML mapping plus where each key path starts in the file."""

    path: Path
    data: dict[str, Any]
    lines: dict[KeyPath, int] = field(default_factory=dict)
    env_keys: set[KeyPath] = field(default_factory=set)  # values that came from the environment

    def line_of(self, key_path: KeyPath) -> int | None:
        """The line of ``key_path`` or of its closest ancestor that has one."""
        for n in range(len(key_path), -1, -1):
            if key_path[:n] in self.lines:
                return self.lines[key_path[:n]]
        return None

    def error(self, message: str, key_path: KeyPath = ()) -> ConfigError:
        return ConfigError(message, file=str(self.path), line=self.line_of(key_path), key=format_key_path(key_path))


def format_key_path(key_path: KeyPath) -> str:
    out = ""
    for part in key_path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def load_yaml(path: Path) -> YamlDocument:
    """Parse ``path`` (a YAML mapping), substitute ``${VAR}`` / ``${VAR:-default}``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror}", file=str(path)) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"invalid YAML: {problem}", file=str(path), line=line) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping of keys at the top level, got {type(data).__name__}", file=str(path), line=1)
    doc = YamlDocument(path=path, data=data)
    if node is not None:
        _collect_lines(node, (), doc.lines)
    doc.data = _substitute_env(doc, data, ())
    return doc


def _collect_lines(node: yaml.Node, prefix: KeyPath, lines: dict[KeyPath, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key_path = prefix + (key_node.value,)
            lines[key_path] = key_node.start_mark.line + 1
            _collect_lines(value_node, key_path, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, child in enumerate(node.value):
            key_path = prefix + (index,)
            lines[key_path] = child.start_mark.line + 1
            _collect_lines(child, key_path, lines)


def _substitute_env(doc: YamlDocument, value: Any, key_path: KeyPath) -> Any:
    if isinstance(value, dict):
        return {k: _substitute_env(doc, v, key_path + (k,)) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute_env(doc, v, key_path + (i,)) for i, v in enumerate(value)]
    if isinstance(value, str) and "${" in value:

        def replace(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise doc.error(f"environment variable {name} is not set (write ${{{name}:-default}} for a default)", key_path)

        doc.env_keys.add(key_path)
        return _ENV_PATTERN.sub(replace, value)
    return value
