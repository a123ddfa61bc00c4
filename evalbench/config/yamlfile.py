"""Reading YAML config files with line numbers and ``${ENV_VAR}`` substitution.

Errors must name the file, the line and the key path, so the loader keeps a map from
key path (a tuple of keys and list indexes) to the line where that value starts.

Config files are untrusted input: the loader is PyYAML's safe one, with limits on the file size,
on what aliases may expand to ("billion laughs"), on recursive anchors and on nesting depth, and
every malformed file is a :class:`ConfigError` — never a traceback, a hang or a memory blow-up.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.error import Mark
from yaml.reader import ReaderError
from yaml.resolver import Resolver

from evalbench.core.errors import ConfigError
from evalbench.core.redaction import is_secret_key, remember_secret, remember_secrets

KeyPath = tuple[str | int, ...]  # keys and list indexes

MAX_YAML_BYTES = 10 * 1024 * 1024  # a config file larger than this is refused
MAX_YAML_VALUES = 100_000  # values (keys, scalars, lists, mappings) in a document, aliases (*name) counted expanded
MAX_YAML_DEPTH = 64  # levels of nested mappings and lists

# ${VAR}, ${VAR:-default}, and ${VAR:default} (pyaml_env's spelling, which EvalBench's configs use)
_ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-?(.*?))?\}")


@dataclass
class YamlDocument:
    """A parsed YAML mapping plus where each key path starts in the file."""

    path: Path
    data: dict[str, object]
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
    """Parse ``path`` (a YAML mapping), substitute ``${VAR}`` / ``${VAR:-default}``.

    Safe on hostile input: at most :data:`MAX_YAML_BYTES` and :data:`MAX_YAML_VALUES` values,
    aliases counted as what they stand for ("billion laughs"), no recursive anchors, at most
    :data:`MAX_YAML_DEPTH` levels of nesting, string keys only, no duplicate keys. Every problem is
    a :class:`ConfigError` naming the file (and the line when known)."""
    text = _read_text(path)
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # checks the characters first
        node = loader.get_single_node()
        lines: dict[KeyPath, int] = {}
        if node is not None:
            _check_and_collect_lines(path, node, (), lines)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise _yaml_error(path, text, exc) from None
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:  # a last resort: no traceback
        raise ConfigError(f"invalid YAML: {type(exc).__name__}: {exc}", file=str(path)) from None
    finally:
        if loader is not None:
            loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping of keys at the top level, got {type(data).__name__}", file=str(path), line=1)
    doc = YamlDocument(path=path, data=data, lines=lines)
    doc.data = {key: _substitute_env(doc, value, (key,)) for key, value in data.items()}
    remember_secrets(doc.data)  # before validation: no error message or log line shows them
    return doc


def _read_text(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a YAML file", file=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", file=str(path)) from None
    if len(raw) > MAX_YAML_BYTES:
        raise ConfigError(f"file is larger than {MAX_YAML_BYTES // (1024 * 1024)} MB: not a config file?", file=str(path))
    try:
        return raw.decode("utf-8-sig")  # a BOM is accepted
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {column}); save the file as UTF-8",
                          file=str(path), line=line) from None


def _yaml_error(path: Path, text: str, exc: yaml.YAMLError) -> ConfigError:
    if isinstance(exc, ReaderError):  # a character YAML does not allow (NUL, other control characters)
        position = exc.position if isinstance(exc.position, int) else 0
        if _CParser is not None:  # libyaml counts bytes of UTF-8
            char_line = text.encode("utf-8").count(b"\n", 0, position) + 1
        else:  # pragma: no cover
            char_line = text.count("\n", 0, position) + 1
        char = exc.character if isinstance(exc.character, int) else 0
        return ConfigError(f"invalid YAML: character U+{char:04X} is not allowed in a YAML file ({exc.reason})",
                           file=str(path), line=char_line)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = getattr(exc, "problem", None) or str(exc)
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context:  # e.g. "while scanning a quoted scalar" (at another line), "found duplicate anchor 'x'; first occurrence"
        at = f" at line {context_mark.line + 1}" if context_mark is not None else ""
        problem = f"{context}{at}: {problem}"
    if line is not None and "\t" in (text.split("\n")[line - 1:line] or [""])[0]:
        problem += " (a tab? YAML indents with spaces only)"
    return ConfigError(f"invalid YAML: {problem}", file=str(path), line=line)


try:  # libyaml's parser when PyYAML has it (several times faster); the composer is always ours, below
    from yaml._yaml import CParser as _CParser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _CParser = None  # type: ignore[assignment,misc]  # PyYAML without libyaml has no CParser


class _EventSource(Protocol):
    """What the composer reads: libyaml's CParser or PyYAML's SafeLoader."""

    def check_event(self, *choices: type[yaml.Event]) -> bool: ...

    def peek_event(self) -> yaml.Event | None: ...

    def get_event(self) -> yaml.Event | None: ...

    def dispose(self) -> None: ...


class _Events:
    """The YAML events of a text: from libyaml when available, else from PyYAML's pure-Python
    reader, scanner and parser."""

    def __init__(self, stream: str) -> None:
        if _CParser is not None:
            self._parser: _EventSource = _CParser(stream)
        else:  # pragma: no cover
            self._parser = yaml.SafeLoader(stream)

    def check_event(self, *choices: type[yaml.Event]) -> bool:
        return self._parser.check_event(*choices)

    def peek_event(self) -> yaml.Event | None:
        return self._parser.peek_event()

    def get_event(self) -> yaml.Event | None:
        return self._parser.get_event()

    def dispose(self) -> None:
        self._parser.dispose()


class _Loader(_Events, Composer, SafeConstructor, Resolver):
    """PyYAML's safe loader, composing with limits: at most :data:`MAX_YAML_VALUES` values,
    counting what aliases stand for ("billion laughs"), no alias to a node that contains it (a
    recursive anchor), at most :data:`MAX_YAML_DEPTH` levels of nesting. A value that cannot be
    constructed (``2020-13-45`` as a date, ``!!int abc``) is an error at its line."""

    def __init__(self, stream: str) -> None:
        _Events.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._depth = 0
        self._expanded = 0  # values composed so far, aliases counted as the values they stand for
        self._open: dict[str | None, int] = {}  # anchors whose node is being composed
        self._sizes: dict[str | None, int] = {}  # anchor -> values in its node, aliases expanded

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()
        # PyYAML's Mark or libyaml's (the stubs' errors take only the first; both work)
        start_mark = cast(Mark, getattr(event, "start_mark", None))
        if isinstance(event, yaml.AliasEvent):
            if self._open.get(event.anchor):
                raise ComposerError(None, None, f"alias *{event.anchor} refers to the node that contains it "
                                    "(a recursive anchor)", start_mark)
            self._expanded += self._sizes.get(event.anchor, 1)
            if self._expanded > MAX_YAML_VALUES:
                raise ComposerError(None, None, f"aliases expand the document to more than {MAX_YAML_VALUES:,} "
                                    "values (a 'billion laughs'?); write the values out instead", start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise ComposerError(None, None, f"nested more than {MAX_YAML_DEPTH} levels deep", start_mark)
        anchor = getattr(event, "anchor", None)
        start = self._expanded
        self._expanded += 1
        if self._expanded > MAX_YAML_VALUES:
            raise ComposerError(None, None, f"more than {MAX_YAML_VALUES:,} values: not a config file?", start_mark)
        if anchor is not None:
            self._open[anchor] = self._open.get(anchor, 0) + 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open[anchor] -= 1
        if anchor is not None:
            self._sizes[anchor] = self._expanded - start
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> object:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, OverflowError) as exc:
            if isinstance(node, yaml.ScalarNode):
                shown = node.value if len(node.value) <= 60 else node.value[:57] + "..."
                message = f"cannot read {shown!r} as {node.tag.rsplit(':', 1)[-1]}: {str(exc)[:200]}"
            else:
                message = str(exc)[:200]
            raise ConstructorError(None, None, message, node.start_mark) from None


def _env_tag(loader: SafeConstructor, node: yaml.Node) -> str:
    """``!ENV ${VAR}``: EvalBench's configs (read with pyaml_env's ``parse_config``) tag values
    that hold environment variables; the ``${...}`` in every string is substituted anyway."""
    if not isinstance(node, yaml.ScalarNode):
        raise ConstructorError(None, None, "!ENV applies to a single value (a string with ${VAR})", node.start_mark)
    return str(loader.construct_scalar(node))


_Loader.add_constructor("!ENV", _env_tag)  # type: ignore[type-var]  # the stubs allow PyYAML's own loaders only

_STR_TAG = "tag:yaml.org,2002:str"
_KEY_TAGS = (_STR_TAG, "tag:yaml.org,2002:merge", "tag:yaml.org,2002:value")


def _check_and_collect_lines(path: Path, node: yaml.Node, prefix: KeyPath, lines: dict[KeyPath, int]) -> None:
    """Record the line of every key path; refuse non-string and duplicate keys (before the
    constructor merges ``<<:`` keys, which may override one another)."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            where = format_key_path(prefix)
            if not isinstance(key_node, yaml.ScalarNode):
                kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
                raise ConfigError(f"a key must be a string, not a {kind}",
                                  file=str(path), line=line, key=where or None)
            if key_node.tag not in _KEY_TAGS:
                kind = key_node.tag.rsplit(":", 1)[-1]
                raise ConfigError(f"key {key_node.value!r} is read as {kind}, not a string (quote it: \"{key_node.value}\")",
                                  file=str(path), line=line, key=where or None)
            if key_node.tag == _STR_TAG:
                if key_node.value in seen:
                    raise ConfigError(f"duplicate key {key_node.value!r} (first at line {seen[key_node.value]})",
                                      file=str(path), line=line, key=format_key_path((*prefix, key_node.value)))
                seen[key_node.value] = line
            key_path = (*prefix, key_node.value)
            lines[key_path] = line
            _check_and_collect_lines(path, value_node, key_path, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, child in enumerate(node.value):
            key_path = (*prefix, index)
            lines[key_path] = child.start_mark.line + 1
            _check_and_collect_lines(path, child, key_path, lines)


def _substitute_env(doc: YamlDocument, value: object, key_path: KeyPath) -> object:
    if isinstance(value, dict):
        return {k: _substitute_env(doc, v, (*key_path, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute_env(doc, v, (*key_path, i)) for i, v in enumerate(value)]
    if isinstance(value, str) and "${" in value:

        def replace(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                if is_secret_key(name):  # ${API_TOKEN} is a secret wherever it is used
                    remember_secret(os.environ[name])
                return os.environ[name]
            if default is not None:
                return default
            raise doc.error(f"environment variable {name} is not set (write ${{{name}:-default}} for a default)", key_path)

        doc.env_keys.add(key_path)
        return _ENV_PATTERN.sub(replace, value)
    return value
