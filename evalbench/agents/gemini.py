"""A Gemini model called directly through the google-genai SDK (EvalBench: gcp_vertex_gemini).

The Gemini Developer API (``api_key_env``, default ``GEMINI_API_KEY``) or Vertex AI
(``vertexai: true``; project and location from the config or ``GOOGLE_CLOUD_PROJECT`` /
``GOOGLE_CLOUD_LOCATION``; application default credentials). ``base_url`` points the SDK at
another endpoint (a proxy, or a local fake in tests): the SDK then POSTs
``{base_url}/v1beta/models/{model}:generateContent`` with the key in ``x-goog-api-key``.

Each turn is one ``models.generate_content`` call with the whole history as ``contents``, the
system prompt as ``system_instruction``, and — with ``clarification: function_calling`` — the
``run_sql`` / ``ask_user`` function declarations (automatic function calling disabled). The
model's own ``Content`` goes back into the history unchanged, so thought signatures survive.
The SDK's retries stay off (no ``retry_options``): every 429 reaches :mod:`evalbench.agents.chat`,
which retries it with our backoff. Prompt, protocol and failures: :mod:`evalbench.agents.chat`.
"""

from __future__ import annotations

from google.genai import types

from evalbench.agents import AgentContext, tool_args
from evalbench.agents.chat import ChatAgent, ModelTurn, ToolResult
from evalbench.agents.tool_args import SchemaSpec, ToolSpec
from evalbench.clients.calls import BODY_KEPT, truncate
from evalbench.clients.genai import first_candidate, generate, make_genai_client, response_json, usage_of
from evalbench.config.agents import GeminiAgentConfig
from evalbench.core.conversation import TokenUsage, ToolCall
from evalbench.core.redaction import redact_url


def _schema(spec: SchemaSpec) -> types.Schema:
    """Our JSON-Schema tool parameters as a Gemini ``Schema`` (objects of strings and integers suffice)."""
    if spec.get("type") == "object":
        return types.Schema(
            type=types.Type.OBJECT,
            properties={name: _schema(prop) for name, prop in spec.get("properties", {}).items()},
            required=list(spec.get("required", [])),
        )
    kind = types.Type.INTEGER if spec.get("type") == "integer" else types.Type.STRING
    return types.Schema(type=kind, description=spec.get("description"))


def function_declarations(specs: list[ToolSpec]) -> list[types.FunctionDeclaration]:
    return [types.FunctionDeclaration(name=t["name"], description=t["description"], parameters=_schema(t["parameters"]))
            for t in specs]


class GeminiAgent(ChatAgent[types.Content]):
    name = "gemini"

    def __init__(self, config: GeminiAgentConfig, context: AgentContext) -> None:
        super().__init__(config, context)
        self.config: GeminiAgentConfig = config
        made = make_genai_client(config, who="gemini agent", config_key="model_config")
        self.client, self.project, self.location = made.client, made.project, made.location
        self._tools = [types.Tool(function_declarations=function_declarations(self.tool_specs))] if self.function_calling else None
        self._automatic_function_calling = types.AutomaticFunctionCallingConfig(disable=True)

    @property
    def endpoint(self) -> str | None:
        return redact_url(self.config.base_url) if self.config.base_url else None

    def describe(self) -> dict[str, object]:
        return super().describe() | {"vertexai": self.config.vertexai, "project": self.project, "location": self.location}

    def close(self) -> None:
        self.client.close()

    def probe(self, timeout_s: float) -> str:
        """Preflight: credentials present, and a ``base_url`` (if any) accepts connections."""
        from evalbench.clients.probes import genai_probe

        return genai_probe(self.config, self.project, self.endpoint, "model_config", timeout_s)

    # ------------------------------------------------------------------ backend

    def user_messages(self, text: str | None, results: list[ToolResult]) -> list[types.Content]:
        parts = [
            types.Part(function_response=types.FunctionResponse(name=r.call.name, id=r.call.id, response=r.response))
            for r in results
        ]
        if text is not None:
            parts.append(types.Part(text=text))
        return [types.Content(role="user", parts=parts)]

    def call_model(self, system: str, history: list[types.Content]) -> ModelTurn[types.Content]:
        config = types.GenerateContentConfig(
            system_instruction=system,
            temperature=self.config.temperature,
            seed=self.seed,
            max_output_tokens=self.config.max_output_tokens,
            tools=self._tools,
            automatic_function_calling=self._automatic_function_calling,
        )
        response = generate(self.client, self.config.model, history, config,
                            endpoint=self.endpoint, timeout_s=self.config.timeout_s)
        return _read(response)


_NOT_RAW = frozenset({"sdk_http_response", "automatic_function_calling_history"})


def _read(response: types.GenerateContentResponse) -> ModelTurn[types.Content]:
    usage = usage_of(response) or TokenUsage()
    candidate = first_candidate(response, raw=truncate(response_json(response, _NOT_RAW), BODY_KEPT) or "")
    content = candidate.content
    texts: list[str] = []
    calls: list[ToolCall] = []
    parts = list((content.parts if content is not None else None) or [])
    replaced = False
    for index, part in enumerate(parts):
        if part.function_call is not None:
            call = part.function_call
            calls.append(ToolCall(name=call.name or "", args=tool_args.decode(call.args), id=call.id))
            if tool_args.problem(calls[-1].args):  # too deep or too large to keep, or to send back
                parts[index] = part.model_copy(update={"function_call": call.model_copy(update={"args": calls[-1].args})})
                replaced = True
        elif part.text and not part.thought:
            texts.append(part.text)
    if content is not None and (content.role != "model" or replaced):
        content = content.model_copy(update={"role": "model", "parts": parts})
        candidate = candidate.model_copy(update={"content": content})
        response = response.model_copy(update={"candidates": [candidate, *(response.candidates or [])[1:]]})
    raw = truncate(response_json(response, _NOT_RAW))
    finish = candidate.finish_reason
    return ModelTurn(
        text="".join(texts),
        calls=calls,
        usage=usage,
        # no content: no text and no call, an error reply that never joins the history
        native=content if content is not None else types.Content(role="model", parts=[]),
        raw=raw,
        finish_reason=getattr(finish, "value", finish) if finish is not None else None,
    )


def build_gemini_agent(config: GeminiAgentConfig, context: AgentContext) -> GeminiAgent:
    return GeminiAgent(config, context)
