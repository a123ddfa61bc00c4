"""Config models of agents and virtual users that other packages provide (docs/extending.md).

``model_config: {agent: NAME, ...}`` names a built-in agent or an entry point of the
``evalbench.agents`` group (``vuser_model_config: {vuser: NAME, ...}``: ``evalbench.vusers``).
For a plugin name every other key is one of the plugin's options. The entry point is loaded when
the config is validated; when the object it loads has an attribute ``Config`` that is a pydantic
model, the options are validated with it then (errors name the config file and the key) and
``config.options`` is that model's instance, otherwise it is the mapping of the other keys.
The factory is called as a built-in one is: ``factory(config, context)`` for an agent,
``factory(config, run_seed, knowledge)`` for a virtual user.
"""

from __future__ import annotations

import functools
import operator
from typing import Annotated, Any, ClassVar, get_args

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from evalbench.config.types import StrictModel
from evalbench.core import registries
from evalbench.core.registry import PluginError, Registry

PLUGIN_TAG = "plugin"


class PluginConfig(StrictModel):
    """A plugin's name (under ``NAME_KEY``) and its options (every other key)."""

    NAME_KEY: ClassVar[str]
    GROUP: ClassVar[str]
    # options first: the name's validator reads them (its errors then point at the name's line)
    options: Any = Field(default_factory=dict, exclude=True, description="every other key: the plugin's options")

    @classmethod
    def registry(cls) -> Registry[Any]:
        """The registry of this kind (agents, virtual users)."""
        raise NotImplementedError

    @property
    def name(self) -> str:
        return str(getattr(self, self.NAME_KEY))

    @model_validator(mode="before")
    @classmethod
    def _gather(cls, data: object) -> object:
        """``{agent: x, rows: 3}`` -> ``{agent: x, options: {rows: 3}}``."""
        if not isinstance(data, dict):
            return data
        return {**({cls.NAME_KEY: data[cls.NAME_KEY]} if cls.NAME_KEY in data else {}),
                "options": {k: v for k, v in data.items() if k != cls.NAME_KEY}}

    @classmethod
    def _check_name(cls, name: str, info: ValidationInfo) -> str:
        """The name must be an installed plugin that loads and accepts the options."""
        registry = cls.registry()
        if name not in registry:
            raise ValueError(f"unknown {registry.kind} {name!r} (known: {', '.join(registry.names())})")
        try:
            factory = registry.get(name)
        except PluginError as exc:
            raise ValueError(str(exc)) from None
        parse_options(registry.kind, name, factory, info.data.get("options", {}), info.context)
        return name

    @model_validator(mode="after")
    def _parsed_options(self, info: ValidationInfo) -> PluginConfig:
        """``options`` becomes the plugin's ``Config`` instance when it has one."""
        if isinstance(self.options, dict):
            registry = self.registry()
            parsed = parse_options(registry.kind, self.name, registry.get(self.name), self.options, info.context)
            object.__setattr__(self, "options", parsed)
        return self

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, object]:
        """Dumped as written (name and options side by side), so a dumped config loads again."""
        options = self.options
        if isinstance(options, BaseModel):
            options = options.model_dump(mode=info.mode, by_alias=info.by_alias)
        return {**handler(self), **dict(options)}

    def describe(self) -> dict[str, object]:
        """Name and options (for a plugin that does not describe itself)."""
        return self.model_dump(mode="json", by_alias=True)


def parse_options(kind: str, name: str, factory: object, options: dict[str, object], context: object) -> Any:
    """Validate ``options`` with ``factory.Config`` (a pydantic model), if the plugin has one."""
    schema = getattr(factory, "Config", None)
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return options
    try:
        return schema.model_validate(options, context=context)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            key = ".".join(str(p) for p in err["loc"]) or "(options)"
            message = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"{key}: {message}")
        raise ValueError(f"options of {kind} {name!r}: " + "; ".join(problems)) from None


def scorer_problem(name: str, options: dict[str, object] | None = None) -> str | None:
    """Why ``name`` with ``options`` cannot be a scorer (unknown, a plugin that does not load,
    options its ``Config`` refuses), or None. A built-in scorer is not imported for this: none
    has a ``Config`` model (tests/core/test_registry.py checks it), so there is nothing to check."""
    scorers = registries.SCORERS
    if name not in scorers:
        return f"unknown scorer {name!r} (known: {', '.join(scorers.names())})"
    if name in scorers.builtins:
        return None
    try:
        parse_options("scorer", name, scorers.get(name), options or {}, None)
    except (PluginError, ValueError) as exc:
        return str(exc)
    return None


class PluginAgentConfig(PluginConfig):
    """An agent from another package: ``agent`` names an entry point of the ``evalbench.agents``
    group; every other key is passed to it as an option (docs/extending.md)."""

    NAME_KEY: ClassVar[str] = "agent"
    GROUP: ClassVar[str] = "evalbench.agents"
    agent: str = Field(description="an entry point of the evalbench.agents group; every other key is one of its options, checked by its Config model if it has one")

    @classmethod
    def registry(cls) -> Registry[Any]:
        return registries.AGENTS

    @field_validator("agent")
    @classmethod
    def _installed(cls, value: str, info: ValidationInfo) -> str:
        return cls._check_name(value, info)


class PluginVUserConfig(PluginConfig):
    """A virtual user from another package: ``vuser`` names an entry point of the
    ``evalbench.vusers`` group; every other key is passed to it as an option (docs/extending.md)."""

    NAME_KEY: ClassVar[str] = "vuser"
    GROUP: ClassVar[str] = "evalbench.vusers"
    vuser: str = Field(description="an entry point of the evalbench.vusers group; every other key is one of its options, checked by its Config model if it has one")

    @classmethod
    def registry(cls) -> Registry[Any]:
        return registries.VUSERS

    @field_validator("vuser")
    @classmethod
    def _installed(cls, value: str, info: ValidationInfo) -> str:
        return cls._check_name(value, info)

    @property
    def patience(self) -> int:
        """The harness's clarification allowance: the plugin's ``patience`` option, else 3."""
        options = self.options
        value = options.get("patience") if isinstance(options, dict) else getattr(options, "patience", None)
        return value if isinstance(value, int) else 3


def discriminated(key: str, models: list[type[StrictModel]], plugin: type[PluginConfig]) -> Any:
    """A union of ``models`` told apart by the literal names of their ``key`` field; any other
    name (or none) selects ``plugin``, whose validation says when the name is unknown."""
    tags: dict[str, str] = {}
    for model in models:
        for name in get_args(model.model_fields[key].annotation):
            tags[name] = model.__name__

    def tag(value: object) -> str:
        name = value.get(key) if isinstance(value, dict) else getattr(value, key, None)
        return tags.get(name, PLUGIN_TAG) if isinstance(name, str) else PLUGIN_TAG

    choices = [Annotated[m, Tag(m.__name__)] for m in models] + [Annotated[plugin, Tag(PLUGIN_TAG)]]
    union = functools.reduce(operator.or_, choices)  # Union[A, B, ...] of a list known only here
    return Annotated[union, Discriminator(tag)]

