"""Tables of config keys, generated from the pydantic models (the one source of defaults).

``python -m evalbench.config.reference`` rewrites the generated part of docs/configuration.md; a test
fails when that part is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

BEGIN = "<!-- BEGIN GENERATED: python -m evalbench.config.reference -->"
END = "<!-- END GENERATED -->"


def _models() -> list[tuple[str, type[BaseModel]]]:
    from evalbench import config
    from evalbench.config import agents, plugins

    return [
        ("Run config", config.RunConfig),
        ("`execution`", config.ExecutionConfig),
        ("`runners`", config.RunnersConfig),
        ("`embedded`", config.EmbeddedConfig),
        ("`reporting.csv`", config.CsvReportingConfig),
        ("Database config (each entry of `database_configs`)", config.DatabaseConfig),
        ("Agent `simulated:oracle` / `simulated:noisy` (`model_config`)", agents.SimulatedAgentConfig),
        ("Agent `adk` (`model_config`; EvalBench `generator: querydata`)", agents.AdkAgentConfig),
        ("`reply` of the `adk` agent", agents.ReplyConvention),
        ("`messages` of the `adk` agent (each a template with {text})", agents.AdkMessages),
        ("`retry` of the `adk`, `gemini` and `openai_compat` agents", agents.RetryConfig),
        ("Agent `gemini` (`model_config`; EvalBench `generator: gcp_vertex_gemini`)", agents.GeminiAgentConfig),
        ("Agent `openai_compat` (`model_config`)", agents.OpenAICompatAgentConfig),
        ("Agent `predictions` (`model_config`; docs/rescore.md)", agents.PredictionsAgentConfig),
        ("Agent `replay` (`model_config`; what `evalbench rescore` uses)", agents.ReplayAgentConfig),
        ("Virtual user `rules` (`vuser_model_config`)", config.RulesVUserConfig),
        ("Virtual user `llm` (`vuser_model_config`)", config.LlmVUserConfig),
        ("Virtual user `replay` (`vuser_model_config`; what `evalbench rescore` uses)", config.ReplayVUserConfig),
        ("Agent from a plugin (`model_config`; docs/extending.md)", plugins.PluginAgentConfig),
        ("Virtual user from a plugin (`vuser_model_config`; docs/extending.md)", plugins.PluginVUserConfig),
    ]


def type_name(annotation: object) -> str:
    """A field's type as the docs' tables spell it (``list of string``, ``integer or null``)."""
    import types
    from typing import Annotated, Literal, Union, get_args, get_origin

    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return type_name(args[0])
    if origin is Literal:
        return " or ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        members = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(members) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if annotation in names:
        return names[annotation]
    name = getattr(annotation, "__name__", str(annotation))
    return {"Path": "path", "SecretStr": "secret string"}.get(name, name)


def _default(field: FieldInfo) -> str:
    if field.default is not PydanticUndefined:
        value = field.default
    elif field.default_factory is not None:
        value = field.get_default(call_default_factory=True, validated_data={})
    else:
        return "**required**"
    if isinstance(value, BaseModel):
        return "(see below)"
    return f"`{value!r}`" if value is not None else "—"


def render() -> str:
    out = [BEGIN, ""]
    for title, model in _models():
        out += [f"### {title}", "", "| key | type | default | meaning |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            if field.exclude:
                continue
            key = field.alias or name
            meaning = (field.description or "").replace("|", "\\|")
            spelled = type_name(field.annotation).replace("|", "\\|")
            out.append(f"| `{key}` | {spelled} | {_default(field)} | {meaning} |")
        out.append("")
    out += _prices()
    out.append(END)
    return "\n".join(out)


def _prices() -> list[str]:
    """The entry of ``prices:`` and the built-in prices (evalbench/config/prices.py)."""
    from evalbench.config.prices import DEFAULT_PRICES, PRICES_AS_OF, ModelPrice

    out = ["### Each entry of `prices` (model name -> price)", "", "| key | type | default | meaning |", "|---|---|---|---|"]
    out += [f"| `{name}` | number | **required** | {field.description} |" for name, field in ModelPrice.model_fields.items()]
    out += ["", f"### Built-in prices (USD per 1M tokens, as of {PRICES_AS_OF}: defaults to check)", "",
            "| model | input | output |", "|---|---:|---:|"]
    out += [f"| `{model}` | {price.input:g} | {price.output:g} |" for model, price in DEFAULT_PRICES.items()]
    return [*out, ""]


def rewrite_blocks(path: Path, blocks: list[tuple[str, str, str]]) -> bool:
    """Replace each ``(begin, end, text)`` block of ``path`` (markers included) with ``text``; True when it changed."""
    text = old = path.read_text(encoding="utf-8-sig")
    for begin, end, new in blocks:
        start, stop = text.index(begin), text.index(end) + len(end)
        text = text[:start] + new + text[stop:]
    if text != old:
        path.write_text(text, encoding="utf-8")
    return text != old


def main(default: str, blocks: list[tuple[str, str, str]]) -> None:
    """``python -m ...``: rewrite the generated blocks of the page named on the command line (or ``default``)."""
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(default)
    print(f"{target}: {'updated' if rewrite_blocks(target, blocks) else 'up to date'}")


if __name__ == "__main__":
    main("docs/configuration.md", [(BEGIN, END, render())])
