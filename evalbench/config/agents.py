"""Config models of every agent kind, told apart by ``agent:`` (EvalBench's ``generator:``).

Part of the config schema (:mod:`evalbench.config`), so it imports no agent: the adapters in
:mod:`evalbench.agents` import these models (``evalbench.agents.config`` re-exports them), and
import their SDKs only when an agent is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from evalbench.config.plugins import PluginAgentConfig, discriminated
from evalbench.config.types import ExistingPath, GenaiClientOptions, ResolvedPath, StrictModel
from evalbench.dataset.session_state import DEFAULT_STATE, TURN_NAMES, check_template

# The ways the simulated:noisy agent fails (evalbench.agents.simulated makes them).
FAILURE_KINDS = (
    "wrong_filter",  # a WHERE condition negated
    "missing_column",  # last projected column dropped
    "sql_error",  # a misspelled column name
    "empty_result",  # an impossible filter
    "needless_question",  # asks a question it does not need, then answers correctly
    "skip_clarification",  # guesses instead of asking (and guesses wrong)
    "no_answer",  # natural-language reply with no SQL
    "agent_error",  # the agent crashes
    "timeout",  # the agent does not answer in time
    "nl_answer",  # not a failure: the right answer in words, no SQL (judged by answer_match)
)

SessionMode = Literal["sticky", "per_turn"]
_SESSION_HELP = "per_turn opens a new session every turn: only to show how an agent that forgets fails"


# The read-only discovery tools an agent may be given (evalbench.agents.tools; docs/tools.md).
DiscoveryTool = Literal["list_tables", "describe_table", "sample_rows", "search_knowledge", "run_sql"]
_TOOLS_HELP = ("read-only discovery tools offered to the agent: list_tables, describe_table, sample_rows, "
               "search_knowledge; run_sql makes the run_sql tool show the agent its rows (docs/tools.md)")


class ToolLimits(StrictModel):
    """Caps of the discovery tools: what one call returns and how many calls a turn or a conversation may make."""

    max_rows: int = Field(20, ge=1, le=1000, description="rows one sample_rows or run_sql call returns")
    max_bytes: int = Field(8192, ge=256, le=1_000_000, description="bytes (JSON) of one tool result; rows are cut to fit")
    max_results: int = Field(5, ge=1, le=50, description="entries one search_knowledge call returns")
    per_turn: int = Field(8, ge=1, description="tool calls in one turn; more are refused and the agent must answer")
    per_conversation: int = Field(24, ge=1, description="tool calls in one conversation")


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
    tools: list[DiscoveryTool] = Field(
        default_factory=list,
        description="discovery tools the agent uses (docs/tools.md): list_tables once, describe_table on each table "
                    "its answer reads, search_knowledge for each knowledge entry the item cites")
    tool_limits: ToolLimits = Field(ToolLimits(), description="caps of the discovery tools")
    knows_knowledge: bool = Field(
        True, description="false: the agent does not know the dataset's knowledge base; a phase citing an entry it "
                          "did not find with search_knowledge is answered with a guess (a wrong filter)")

    @field_validator("failure_rates")
    @classmethod
    def _known_failures(cls, value: dict[str, float]) -> dict[str, float]:
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


_AGENT_ENGINE = ("EvalBench creates each session in Vertex AI Agent Engine (util/session.py::EvalAgentEngineSessionMgr); "
                 "we create it on the api_server (POST /apps/{app}/users/{user}/sessions): start `adk api_server "
                 "--session_service_uri agentengine://<agent_engine_id>` to keep sessions in Agent Engine")


class AdkMessages(StrictModel):
    """What the harness's messages become on their way to an ADK agent: per kind of message, a
    template with ``{text}`` (the harness's own words) and the names of ``state_each_turn``."""

    main: str = Field("{text}", description="the main phase's question")
    follow_up: str = Field("{text}", description="the follow-up question")
    clarification_answer: str = Field("{text}", description="the virtual user's answer to the agent's question")
    debug: str = Field("{text}", description="the user's 'that is not the result I expected' after a wrong answer "
                       "(debug_attempts)")

    @model_validator(mode="after")
    def _known_placeholders(self) -> AdkMessages:
        for kind, template in self.model_dump().items():
            check_template(template, key=kind, more=(*TURN_NAMES, "text"))
        return self


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
    model: str | None = Field(None, description="the model the ADK app runs, as the price table names it: recorded, and used "
                              "only to price the tokens the app reports (the app chooses its model; none: cost unknown)")
    session_state: dict[str, object] = Field(
        default_factory=lambda: dict(DEFAULT_STATE),
        description="the state each ADK session is created with: string values are templates over the item "
                    "({database}, {dialect}, {item_id}, {category}, {difficulty}, {knowledge_ids}, {schema}, {external_kg}, {max_turn}, "
                    "{schema_file}; with serve: {mcp_url}, {mcp_token}, {served_url}, {task_id}); {} sends none "
                    "(docs/agents.md)")
    state_each_turn: dict[str, object] = Field(
        default_factory=dict,
        description="state sent with every turn (ADK's state_delta of /run): templates as session_state's, also over "
                    "{phase} (main | follow_up) and {turn} (1-based), e.g. BIRD-Interact's _submitted_this_phase: false")
    messages: AdkMessages | None = Field(
        None, description="templates the harness's messages are wrapped in, per kind: main, follow_up, "
                          "clarification_answer, debug ({text}: the harness's own words)")
    # EvalBench's querydata keys that its ADK client does not send to the agent (docs/evalbench_compat.md)
    base_prompt: str | None = Field(None, description="EvalBench key; not applied (its querydata generator does not read it either)")
    vertex_model: str | None = Field(None, description="EvalBench key; not applied (the ADK app chooses its model)")
    project_id: str | None = Field(None, description="EvalBench key (Agent Engine sessions); not applied: sessions are made on the api_server")
    location: str | None = Field(None, description="EvalBench key (Agent Engine sessions); not applied: sessions are made on the api_server")
    agent_engine_id: str | None = Field(None, description="EvalBench key (Agent Engine sessions); not applied: sessions are made on the api_server")

    @field_validator("session_state")
    @classmethod
    def _known_placeholders(cls, value: dict[str, object]) -> dict[str, object]:
        check_template(value, key="")  # pydantic names model_config.session_state; we name the key under it
        return value

    @field_validator("state_each_turn")
    @classmethod
    def _known_turn_placeholders(cls, value: dict[str, object]) -> dict[str, object]:
        check_template(value, key="", more=TURN_NAMES)
        return value

    NOT_APPLIED: ClassVar[dict[str, str]] = {
        "base_prompt": "EvalBench's querydata generator does not read base_prompt either; the agent receives the user's words",
        "vertex_model": "the ADK app chooses its own model; EvalBench's querydata generator does not read vertex_model either",
        "agent_engine_id": _AGENT_ENGINE,
        "project_id": "where EvalBench keeps its Agent Engine sessions (see agent_engine_id)",
        "location": "where EvalBench keeps its Agent Engine sessions (see agent_engine_id)",
    }


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
    tools: list[DiscoveryTool] = Field(default_factory=list, description=_TOOLS_HELP)
    tool_limits: ToolLimits = Field(ToolLimits(), description="caps of the discovery tools")

    @model_validator(mode="after")
    def _tools_need_function_calling(self) -> ChatAgentOptions:
        if self.tools and self.clarification != "function_calling":
            raise ValueError("tools need clarification: function_calling (the model calls them as functions)")
        return self


class GeminiAgentConfig(ChatAgentOptions, GenaiClientOptions):
    """A Gemini model through google-genai (EvalBench: generator: gcp_vertex_gemini)."""

    agent: Literal["gemini"] = Field(description="gemini")
    model: str = Field("gemini-2.5-flash", alias="vertex_model", description="the Gemini model")
    base_prompt: str = Field("", description="EvalBench key: text put before the system prompt (EvalBench puts it before every prompt)")


class OpenAICompatAgentConfig(ChatAgentOptions):
    """Any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp) over httpx."""

    agent: Literal["openai_compat"] = Field(description="openai_compat")
    base_url: str = Field(description="the server, e.g. http://127.0.0.1:11434/v1 (…/chat/completions is appended)")
    api_key_env: str | None = Field(None, description="environment variable holding a bearer token, if the server needs one")
    headers: dict[str, SecretStr] = Field(default_factory=dict, description="extra headers; never written out")


class PredictionsAgentConfig(StrictModel):
    """A predictions file (item id -> SQL) scored through the whole pipeline; no agent is called
    and no question is asked (docs/rescore.md)."""

    agent: Literal["predictions"] = Field(description="predictions")
    predictions_file: ExistingPath = Field(description="JSON, JSONL or CSV file of predictions (formats: docs/rescore.md)")
    follow_up_file: ExistingPath | None = Field(
        None, description="the follow-up phase's predictions, in a file of their own (BIRD-Interact's `_fu` file)")
    format: Literal["auto", "bird_interact", "evalbench", "jsonl"] = Field(
        "auto", description="bird_interact: instance_id + pred_sqls; evalbench: id + generated_sql; jsonl/auto: any of them")


HTTP_TURN_NAMES = ("message", "session_id", "turn", "phase")  # what a request template may name besides the item


class HttpReply(StrictModel):
    """Where the parts of a reply are in the agent's JSON response: JMESPath expressions
    (jmespath.org: ``output.text``, ``choices[0].message.content``); null: the reply has no such part."""

    text: str | None = Field("text", description="the reply's text (an answer in words when it carries no SQL)")
    sql: str | None = Field("sql", description="the SQL the agent answers with")
    question: str | None = Field(None, description="a clarification question (non-empty: the reply asks the user)")
    session_id: str | None = Field(None, description="a session id the server gives; sent back as {session_id} from "
                                   "then on (none: the harness's own id for the conversation)")

    @field_validator("text", "sql", "question", "session_id")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            import jmespath

            try:
                jmespath.compile(value)
            except jmespath.exceptions.JMESPathError as exc:
                raise ValueError(f"not a JMESPath expression: {value!r} ({exc})") from None
        return value


class HttpAgentConfig(StrictModel):
    """Any agent behind a JSON-over-HTTP endpoint, described by a request template and where its
    reply's parts are (docs/agents.md#a-generic-http-agent)."""

    agent: Literal["http"] = Field(description="http")
    url: str = Field(description="the endpoint each turn is POSTed to, e.g. http://127.0.0.1:8080/chat")
    request: dict[str, object] = Field(
        default_factory=lambda: dict[str, object](message="{message}", session_id="{session_id}"),
        description="the JSON body of each turn: string values are templates over the turn ({message}, {session_id}, "
                    "{turn}, {phase}) and the item (as session_state); a string that is one placeholder keeps its type")
    reply: HttpReply = Field(HttpReply(), description="where the reply's parts are")
    headers: dict[str, SecretStr] = Field(default_factory=dict, description="extra headers, e.g. Authorization: Bearer ${TOKEN}; never written out")
    connect_timeout_s: float = Field(5.0, gt=0, description="connect timeout of every request")
    read_timeout_s: float = Field(300.0, gt=0, description="time an agent turn may take before it is a timeout")
    retry: RetryConfig = Field(RetryConfig(), description="retries before a request reaches the agent")
    model: str | None = Field(None, description="the model behind the endpoint, as the price table names it (recorded only)")

    @field_validator("request")
    @classmethod
    def _known_placeholders(cls, value: dict[str, object]) -> dict[str, object]:
        check_template(value, key="", more=HTTP_TURN_NAMES)
        return value


class ReplayAgentConfig(StrictModel):
    """Replays the replies recorded in a run's journal (what `evalbench rescore` uses)."""

    agent: Literal["replay"] = Field(description="replay")
    run_dir: ExistingPath = Field(description="the run directory whose conversations.jsonl is replayed")


# Told apart by `agent:`; a name no built-in model declares is a plugin's (evalbench/config/plugins.py).
if TYPE_CHECKING:  # what a type checker sees; pydantic gets the tagged union
    AgentConfig = (SimulatedAgentConfig | AdkAgentConfig | GeminiAgentConfig | OpenAICompatAgentConfig
                   | HttpAgentConfig | PredictionsAgentConfig | ReplayAgentConfig | PluginAgentConfig)
else:
    AgentConfig = discriminated(
        "agent",
        [SimulatedAgentConfig, AdkAgentConfig, GeminiAgentConfig, OpenAICompatAgentConfig, HttpAgentConfig,
         PredictionsAgentConfig, ReplayAgentConfig],
        PluginAgentConfig,
    )

# EvalBench's `generator:` names of the same agents.
_GENERATORS = {"querydata": "adk", "gcp_vertex_gemini": "gemini", "gemini": "gemini"}


def agent_shorthand(value: object) -> object:
    """`model_config: simulated:oracle` is shorthand for `{agent: simulated:oracle}`; EvalBench's
    `generator` key names the agent too."""
    if isinstance(value, str) and not value.endswith((".yaml", ".yml")):
        return {"agent": value}
    if isinstance(value, dict) and "generator" in value and "agent" not in value:
        value = dict(value)
        generator = value.pop("generator")
        value = _from_generator(str(generator), value)
    return value


def _from_generator(generator: str, value: dict[str, object]) -> dict[str, object]:
    """An EvalBench model config (``generators/models/__init__.py::get_generator``) as ours."""
    from evalbench.config.compat import REJECTED_GENERATORS, gcp_defaults, max_attempts

    if generator in REJECTED_GENERATORS:
        raise ValueError(f"generator {generator!r} is not supported: {REJECTED_GENERATORS[generator]}")
    if generator not in _GENERATORS:
        raise ValueError(f"generator {generator!r} is not a data agent here: use generator: querydata (an ADK agent) "
                         "or gcp_vertex_gemini, or agent: adk | gemini | openai_compat | simulated:oracle")
    value["agent"] = _GENERATORS[generator]
    value = max_attempts(value)
    if value["agent"] == "gemini":
        value = gcp_defaults(value)
        if "max_tokens" in value:  # EvalBench's general generator key
            value.setdefault("max_output_tokens", value.pop("max_tokens"))
    return value


def default_prompt(name: str) -> Path:
    """A prompt shipped in the package (``prompts/<name>``)."""
    return Path(__file__).resolve().parents[1] / "prompts" / name  # evalbench/prompts
