"""The virtual-user configs: rule-based, LLM-simulated, replayed, or a plugin's."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import (
    Field,
)

from evalbench.config.agents import RetryConfig
from evalbench.config.compat import (
    gcp_defaults,
    max_attempts,
)
from evalbench.config.plugins import PluginVUserConfig, discriminated
from evalbench.config.types import (
    ExistingPath,
    GenaiClientOptions,
    ResolvedPath,
    StrictModel,
)


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


# a name no built-in model declares is a plugin's (evalbench/config/plugins.py)
if TYPE_CHECKING:  # what a type checker sees; pydantic gets the tagged union
    VUserConfig = RulesVUserConfig | LlmVUserConfig | ReplayVUserConfig | PluginVUserConfig
else:
    VUserConfig = discriminated("vuser", [RulesVUserConfig, LlmVUserConfig, ReplayVUserConfig], PluginVUserConfig)


def vuser_shorthand(value: object) -> object:
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


