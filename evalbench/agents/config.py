"""Config models of every agent kind, told apart by ``agent:`` (EvalBench's ``generator:``).

Kept free of heavy imports: the adapters import their SDKs only when an agent is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Field, SecretStr, field_validator

from evalbench.config_types import GenaiClientOptions, ResolvedPath, StrictModel

SessionMode = Literal["sticky", "per_turn"]
_SESSION_HELP = "per_turn opens a new session every turn: only to show how an agent that forgets fails"


class SimulatedAgentConfig(StrictModel):
    """Offline agents: ``simulated:oracle`` answers with the golden SQL; ``simulated:noisy`` is seeded
    and fails in realistic ways at the configured rates."""

    agent: Literal["simulated:oracle", "simulated:noisy"] = Field(description="which simulated agent (EvalBench key: generator)")
    seed: int | None = Field(None, description="seed of the agent's failures (default: the run seed)")
    latency_s: float = Field(0.0, ge=0, description="simulated time per turn, in seconds")
    session: SessionMode = Field("sticky", description=_SESSION_HELP)
    failure_rates: dict[str, float] = Field(
        default_factory=dict,
        description="noisy agent: probability of each failure kind per phase (see docs/agents.md)",
    )

    @field_validator("failure_rates")
    @classmethod
    def _known_failures(cls, value: dict[str, float]) -> dict[str, float]:
        from evalbench.agents.simulated import FAILURE_KINDS

        for kind, rate in value.items():
            if kind not in FAILURE_KINDS:
                raise ValueError(f"unknown failure kind {kind!r} (known: {', '.join(FAILURE_KINDS)})")
            if not 0 <= rate <= 1:
                raise ValueError(f"rate of {kind!r} must be between 0 and 1, got {rate}")
        if sum(value.values()) > 1:
            raise ValueError("failure rates add up to more than 1")
        return value


class ReplyConvention(StrictModel):
    """How an ADK agent's events are read as sql / clarification / answer (docs/agents.md)."""

    convention: Literal["auto", "gda", "request_input", "sql_tool", "text"] = Field(
        "auto", description="auto tries gda, request_input, sql_tool, then text"
    )
    gda_tool: str = Field("cloud_gda_query_tool_alloydb", description="EvalBench/GDA tool whose response holds generatedQuery")
    sql_tool: str | None = Field(None, description="a tool whose call carries the SQL (convention sql_tool)")
    sql_arg: str = Field("sql", description="the argument of sql_tool holding the SQL")


class RetryConfig(StrictModel):
    max_retries: int = Field(4, ge=0, description="retries of a request that cannot have reached the agent")
    backoff_s: float = Field(0.5, gt=0, description="first backoff; doubles each retry, with full jitter")
    max_backoff_s: float = Field(30.0, gt=0, description="cap of one backoff (Retry-After is honoured up to this)")


class AdkAgentConfig(StrictModel):
    """An agent served by Google ADK's ``adk api_server`` (EvalBench's ``generator: querydata``)."""

    agent: Literal["adk"] = Field(description="adk (EvalBench: generator: querydata)")
    base_url: str = Field(alias="adkapi_server_url", description="the api_server, e.g. http://127.0.0.1:8000")
    app_name: str = Field(alias="agent_id", description="the ADK app (agent folder) name")
    user_id: str = Field("evalbench", description="user id of the sessions")
    endpoint: Literal["run", "run_sse"] = Field("run", description="POST /run, or /run_sse (server-sent events)")
    headers: dict[str, SecretStr] = Field(default_factory=dict, description="extra headers, e.g. Authorization: Bearer ${TOKEN}; never written out")
    connect_timeout_s: float = Field(5.0, gt=0, description="connect timeout of every request")
    read_timeout_s: float = Field(300.0, gt=0, description="time an agent turn may take before it is a timeout")
    execs_per_minute: float | None = Field(None, gt=0, description="rate limit of turns (requests per minute)")
    max_concurrency: int | None = Field(None, ge=1, description="turns in flight at once against this server")
    retry: RetryConfig = Field(RetryConfig(), description="retries before a request reaches the agent")
    reply: ReplyConvention = Field(ReplyConvention(), description="how replies are classified")
    session: SessionMode = Field("sticky", description=_SESSION_HELP)
    raw_events_max_chars: int = Field(20_000, ge=0, description="raw events kept per turn in the journal")


class ChatAgentOptions(StrictModel):
    """What an LLM agent called directly (gemini, openai_compat) shares."""

    model: str = Field(description="the model name")
    temperature: float = Field(0.0, ge=0, description="sampling temperature")
    seed: int | None = Field(None, description="sampling seed, when the model supports one")
    max_output_tokens: int | None = Field(None, ge=1, description="cap of tokens per reply")
    system_prompt: ResolvedPath | None = Field(None, description="system prompt file (default: prompts/agent_system.txt)")
    include_knowledge: bool = Field(False, description="also show the item's external knowledge entries")
    clarification: Literal["function_calling", "tagged_text"] = Field(
        "function_calling", description="run_sql / ask_user tools, or <sql> / <question> tags in text"
    )
    timeout_s: float = Field(120.0, gt=0, description="time one model call may take")
    execs_per_minute: float | None = Field(None, gt=0, description="rate limit of model calls")
    max_concurrency: int | None = Field(None, ge=1, description="model calls in flight at once")
    retry: RetryConfig = Field(RetryConfig(), description="retries of rate-limited or unavailable calls")
    session: SessionMode = Field("sticky", description=_SESSION_HELP)


class GeminiAgentConfig(ChatAgentOptions, GenaiClientOptions):
    """A Gemini model through google-genai (EvalBench: generator: gcp_vertex_gemini)."""

    agent: Literal["gemini"] = Field(description="gemini")
    model: str = Field("gemini-2.5-flash", alias="vertex_model", description="the Gemini model")


class OpenAICompatAgentConfig(ChatAgentOptions):
    """Any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp) over httpx."""

    agent: Literal["openai_compat"] = Field(description="openai_compat")
    base_url: str = Field(description="the server, e.g. http://127.0.0.1:11434/v1 (…/chat/completions is appended)")
    api_key_env: str | None = Field(None, description="environment variable holding a bearer token, if the server needs one")
    headers: dict[str, SecretStr] = Field(default_factory=dict, description="extra headers; never written out")


AgentConfig = Annotated[
    Union[SimulatedAgentConfig, AdkAgentConfig, GeminiAgentConfig, OpenAICompatAgentConfig],
    Field(discriminator="agent"),
]

# EvalBench's `generator:` names of the same agents.
_GENERATORS = {"querydata": "adk", "gcp_vertex_gemini": "gemini", "gemini": "gemini"}


def _agent_shorthand(value: Any) -> Any:
    """`model_config: simulated:oracle` is shorthand for `{agent: simulated:oracle}`; EvalBench's
    `generator` key names the agent too."""
    if isinstance(value, str) and not value.endswith((".yaml", ".yml")):
        return {"agent": value}
    if isinstance(value, dict) and "generator" in value and "agent" not in value:
        value = dict(value)
        generator = value.pop("generator")
        value["agent"] = _GENERATORS.get(generator, generator)
    return value


def default_prompt(name: str) -> Path:
    """A prompt shipped in the package (``prompts/<name>``)."""
    return Path(__file__).resolve().parent.parent / "prompts" / name  # evalbench/prompts -> ../prompts
