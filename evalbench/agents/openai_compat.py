"""Any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp's llama-server, ...) over httpx.

Each turn is one ``POST {base_url}/chat/completions`` with ``model``, ``messages`` (the system
prompt, then the whole history), ``temperature``, ``seed``, ``max_tokens`` and — with
``clarification: function_calling`` — ``tools`` (``run_sql`` / ``ask_user`` and the configured discovery tools in the
OpenAI function format). ``choices[0].message`` is read (``content``; ``tool_calls[].function.{name,
arguments}``, arguments being a JSON string) and ``usage.{prompt,completion,total}_tokens``.
Tool results go back as ``role: tool`` messages. A bearer token is read from ``api_key_env``
when set; ``headers`` are added to every request and never written out.
Prompt, protocol and failures: :mod:`evalbench.agents.chat`.
"""

from __future__ import annotations

import json
import os

import httpx

from evalbench.agents import AgentContext, tool_args
from evalbench.agents.chat import ChatAgent, ModelTurn, ToolResult
from evalbench.clients.calls import BODY_KEPT, CallFailed, transport_failure, truncate
from evalbench.clients.http import ReplyTooLarge, deadline_transport, request_bounded
from evalbench.clients.limits import RETRY_STATUSES, parse_retry_after
from evalbench.config.agents import OpenAICompatAgentConfig
from evalbench.core.conversation import TokenUsage, ToolCall
from evalbench.core.errors import ConfigError
from evalbench.core.redaction import redact_url, remember_secret


class OpenAICompatAgent(ChatAgent[dict[str, object]]):
    name = "openai_compat"

    def __init__(self, config: OpenAICompatAgentConfig, context: AgentContext) -> None:
        super().__init__(config, context)
        self.config: OpenAICompatAgentConfig = config
        headers = {name: value.get_secret_value() for name, value in config.headers.items()}
        if config.api_key_env:
            key = os.environ.get(config.api_key_env)
            remember_secret(key)  # scrubbed from anything written, should an error or the model quote it
            if not key:
                raise ConfigError(f"environment variable {config.api_key_env} is not set (api_key_env of the openai_compat agent)",
                                  key="model_config.api_key_env")
            headers.setdefault("Authorization", f"Bearer {key}")
        self.client = httpx.Client(
            base_url=config.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(config.timeout_s, connect=min(config.timeout_s, 10.0)),
            transport=deadline_transport(),  # timeout_s and the conversation deadline bound the whole reply
        )
        self.openai_tools: list[dict[str, object]] = [{"type": "function", "function": tool} for tool in self.tool_specs]

    @property
    def endpoint(self) -> str:
        return redact_url(self.config.base_url)

    def describe(self) -> dict[str, object]:
        return super().describe() | {"header_names": sorted(self.config.headers), "bearer_token": bool(self.config.api_key_env)}

    def close(self) -> None:
        self.client.close()

    def probe(self, timeout_s: float) -> str:
        """Preflight: ``GET /models`` lists the model, or else the model answers a one-token
        request. Fails on a server that cannot be reached, refuses the credentials (401/403) or
        does not know the model (404); any other answer shows the server is up, and passes."""
        from evalbench.clients.probes import NoAnswer, excerpt, http_probe

        where, model = self.endpoint, self.config.model
        fix = "start the server, or fix model_config base_url"
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0))
        served: list[str] = []
        try:
            listed = http_probe(lambda: self.client.get("models", timeout=timeout), where, fix, timeout_s)
        except NoAnswer:
            listed = None
        if listed is not None:
            self._refused(listed)
            served = _model_ids(listed)
            if model in served:
                return f"{where} lists the model {model!r}"
        body = {"model": model, "messages": [{"role": "user", "content": "Reply with OK."}], "max_tokens": 1,
                "temperature": 0, "stream": False}
        try:
            answer = http_probe(lambda: self.client.post("chat/completions", json=body, timeout=timeout), where, fix, timeout_s)
        except NoAnswer as exc:
            return f"{where} is up ({exc})"
        self._refused(answer)
        if answer.status_code == 404:
            listed_text = f"; it lists {', '.join(served[:20])}" if served else ""
            raise ConfigError(f"{where} does not serve the model {model!r} (HTTP 404 {excerpt(answer.text)!r}{listed_text}); "
                              "fix model_config model", key="model_config.model")
        if answer.status_code < 300:
            return f"the model {model!r} at {where} answered a one-token request"
        return f"{where} is up (a one-token request got HTTP {answer.status_code} {excerpt(answer.text)!r})"

    def _refused(self, response: httpx.Response) -> None:
        if response.status_code in (401, 403):
            key = "api_key_env" if self.config.api_key_env else "headers"
            raise ConfigError(f"{self.endpoint} refused the credentials (HTTP {response.status_code}); "
                              f"check model_config {key}", key=f"model_config.{key}")

    # ------------------------------------------------------------------ backend

    def user_messages(self, text: str | None, results: list[ToolResult]) -> list[dict[str, object]]:
        messages: list[dict[str, object]] = [
            {"role": "tool", "tool_call_id": r.call.id, "content": json.dumps(r.response)} for r in results
        ]
        if text is not None:
            messages.append({"role": "user", "content": text})
        return messages

    def call_model(self, system: str, history: list[dict[str, object]]) -> ModelTurn[dict[str, object]]:
        c = self.config
        body: dict[str, object] = {
            "model": c.model,
            "messages": [{"role": "system", "content": system}, *history],
            "temperature": c.temperature,
            "seed": self.seed,
            "stream": False,
        }
        if c.max_output_tokens is not None:
            body["max_tokens"] = c.max_output_tokens
        if self.function_calling:
            body["tools"] = self.openai_tools
        try:
            # ASCII JSON: a lone surrogate the model sent (and we send back in the history) stays an escape
            response = request_bounded(self.client, "POST", "chat/completions", total_s=c.timeout_s,
                                       content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        except httpx.HTTPError as exc:
            failure = transport_failure(exc, self.endpoint, c.timeout_s)
            raise failure or CallFailed(f"{type(exc).__name__}: {exc}", "connection") from None
        except ReplyTooLarge as exc:
            raise CallFailed(str(exc), "protocol") from None
        if response.status_code in RETRY_STATUSES:
            raise CallFailed(f"HTTP {response.status_code}: {response.text[:BODY_KEPT]}", f"http_{response.status_code}",
                             retryable=True, retry_after=parse_retry_after(response.headers.get("retry-after")))
        if response.status_code >= 400:
            raise CallFailed(f"HTTP {response.status_code}: {response.text[:BODY_KEPT]}", f"http_{response.status_code}")
        try:
            data: object = response.json()
        except ValueError as exc:
            raise CallFailed(f"malformed response (not JSON: {exc}): {response.text[:BODY_KEPT]}", "protocol") from None
        return _read(data, response.text)


def _read(data: object, text: str) -> ModelTurn[dict[str, object]]:
    raw = truncate(text)
    if not isinstance(data, dict):
        raise CallFailed(f"malformed response (not an object): {text[:BODY_KEPT]}", "protocol")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        error = data.get("error")
        detail = f"error: {json.dumps(error)[:BODY_KEPT]}" if error else f"no choices: {text[:BODY_KEPT]}"
        raise CallFailed(f"malformed response ({detail})", "protocol")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise CallFailed(f"malformed response (choices[0].message is missing): {text[:BODY_KEPT]}", "protocol")
    content = _text(message.get("content"))
    calls: list[ToolCall] = []
    native_calls: list[dict[str, object]] = []
    for index, raw_call in enumerate(message.get("tool_calls") or []):
        if not isinstance(raw_call, dict):
            continue
        function = raw_call.get("function") or {}
        call_id = str(raw_call.get("id") or f"call_{index}")  # tool messages must name the call
        name = str(function.get("name") or "")
        arguments = function.get("arguments")
        args = tool_args.decode(arguments)
        calls.append(ToolCall(name=name, args=args, id=call_id))
        native_calls.append({
            "id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments if isinstance(arguments, str) else _json_text(args)},
        })
    native: dict[str, object] = {"role": "assistant", "content": content or None}
    if native_calls:
        native["tool_calls"] = native_calls
    elif not content:
        native["content"] = ""
    usage = TokenUsage()
    meta = data.get("usage")
    if isinstance(meta, dict):
        usage = TokenUsage.reported(meta.get("prompt_tokens"), meta.get("completion_tokens"), meta.get("total_tokens"))
        usage.total = usage.total or usage.prompt + usage.completion
    finish = choice.get("finish_reason")
    return ModelTurn(text=content, calls=calls, usage=usage, native=native, raw=raw,
                     finish_reason=str(finish) if finish is not None else None)


def _json_text(args: dict[str, object]) -> str:
    """Arguments sent as an object (Ollama), as the JSON text the history keeps."""
    try:
        return json.dumps(args)
    except (TypeError, ValueError, RecursionError):
        return "{}"


def _text(content: object) -> str:
    """``content`` as text: a string, null, or a list of ``{type: text, text}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    return str(content)


def _model_ids(response: httpx.Response) -> list[str]:
    """The model ids of a ``GET /models`` answer (``{"data": [{"id": ...}]}``); [] for anything else."""
    try:
        data = response.json() if response.status_code == 200 else None
    except ValueError:
        return []
    entries = data.get("data") if isinstance(data, dict) else None
    return [str(e["id"]) for e in entries if isinstance(e, dict) and "id" in e] if isinstance(entries, list) else []


def build_openai_compat_agent(config: OpenAICompatAgentConfig, context: AgentContext) -> OpenAICompatAgent:
    return OpenAICompatAgent(config, context)
