"""The one place a google-genai client is made (the gemini agent and the llm virtual user).

The SDK's own retries are off, so that our retry logic (evalbench/clients/limits.py) sees every
429 and 503. The API key comes from the environment, or Vertex AI settings do.
"""

from __future__ import annotations

import json
import os
import re
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from evalbench.clients.calls import BODY_KEPT, CallFailed, transport_failure, truncate
from evalbench.clients.http import deadline_transport
from evalbench.clients.limits import RETRY_STATUSES, parse_retry_after
from evalbench.core import deadline
from evalbench.core.conversation import TokenUsage, token_count
from evalbench.core.errors import ConfigError
from evalbench.core.redaction import remember_secret

if TYPE_CHECKING:
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types

    from evalbench.core.usage import CallUsage

# a RetryInfo delay, e.g. "12s" or "0.5s"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


class GenaiSettings(Protocol):
    """What :func:`make_genai_client` reads of a config (``GenaiClientOptions`` and a ``timeout_s``:
    the gemini agent's, the llm virtual user's, the llmrater judge's)."""

    @property
    def base_url(self) -> str | None: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def vertexai(self) -> bool: ...
    @property
    def project(self) -> str | None: ...
    @property
    def location(self) -> str | None: ...
    @property
    def api_key_env(self) -> str: ...


@dataclass
class GenaiClient:
    client: genai.Client
    project: str | None
    location: str | None


def make_genai_client(config: GenaiSettings, *, who: str, config_key: str) -> GenaiClient:
    """A client for ``config`` (fields: base_url, timeout_s, vertexai, project, location,
    api_key_env). ``who`` and ``config_key`` name the user of the client in error messages."""
    import certifi
    from google import genai
    from google.genai import types

    http_options = types.HttpOptions(
        base_url=config.base_url,
        timeout=max(1, int(config.timeout_s * 1000)),  # milliseconds
        retry_options=types.HttpRetryOptions(attempts=1),  # no SDK retries: ours see every 429
    )
    if not config.vertexai:  # Vertex AI may need the SDK's own TLS setup (client certificates)
        # timeout_s and the conversation deadline bound each whole call, not only each read
        http_options.client_args = {"transport": deadline_transport(verify=ssl.create_default_context(cafile=certifi.where()))}
    if config.vertexai:
        project = config.project or os.environ.get("GOOGLE_CLOUD_PROJECT")
        location = config.location or os.environ.get("GOOGLE_CLOUD_LOCATION")
        if not project:
            raise ConfigError(f"vertexai: true needs project_id in the {who} config or GOOGLE_CLOUD_PROJECT in the "
                              "environment", key=f"{config_key}.project_id")
        try:
            client = genai.Client(vertexai=True, project=project, location=location, http_options=http_options)
        except Exception as exc:  # noqa: BLE001 (e.g. no application default credentials)
            raise ConfigError(f"cannot create the Vertex AI client: {type(exc).__name__}: {exc}") from None
        return GenaiClient(client, project, location)
    key = os.environ.get(config.api_key_env)
    remember_secret(key)  # scrubbed from anything written, should an error or a model quote it
    if not key:
        raise ConfigError(
            f"environment variable {config.api_key_env} is not set: the {who} needs a Gemini API key there "
            "(or set api_key_env, or vertexai: true)",
            key=f"{config_key}.api_key_env",
        )
    return GenaiClient(genai.Client(api_key=key, http_options=http_options), None, None)


def response_json(response: types.GenerateContentResponse, exclude: frozenset[str] = frozenset({"sdk_http_response"})) -> str:
    """A response as compact JSON text. Not pydantic's ``model_dump_json``: it fails on text
    Python holds but UTF-8 cannot (a lone surrogate the server sent escaped)."""
    try:
        data = response.model_dump(mode="json", exclude_none=True, by_alias=True, exclude=set(exclude))
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError) as exc:  # nested past pydantic's depth: not kept
        return json.dumps({"unreadable_response": f"{type(exc).__name__}: {exc}"})


def first_candidate(response: types.GenerateContentResponse, *, raw: str = "") -> types.Candidate:
    """The response's first candidate; :class:`~evalbench.clients.calls.CallFailed` when the prompt
    was blocked or no candidate came back (``raw``: the body, quoted in the message)."""
    candidates = response.candidates or []
    if not candidates:
        feedback = response.prompt_feedback
        block = feedback.block_reason if feedback is not None else None
        if block is not None:
            raise CallFailed(f"the prompt was blocked: {getattr(block, 'value', block)}", "blocked")
        raise CallFailed("the response has no candidates" + (f": {raw}" if raw else ""), "protocol")
    return candidates[0]


def response_text(response: types.GenerateContentResponse, *, empty: str = "empty completion") -> str:
    """The text of the first candidate (thoughts left out); :class:`CallFailed` when the prompt
    was blocked, no candidate came back (the body is quoted) or the text is blank (``empty``)."""
    if not response.candidates:
        raw = response_json(response)
        first_candidate(response, raw=truncate(raw, BODY_KEPT) or "")
    candidate = first_candidate(response)
    parts = (candidate.content.parts if candidate.content is not None else None) or []
    text = "".join(p.text for p in parts if p.text and not p.thought)
    if not text.strip():
        finish = candidate.finish_reason
        reason = f" (finish reason: {getattr(finish, 'value', finish)})" if finish is not None else ""
        raise CallFailed(f"{empty}{reason}", "empty")
    return text.strip()


def usage_of(response: types.GenerateContentResponse) -> TokenUsage | None:
    """The token usage a google-genai response reported (``usage_metadata``), thinking tokens
    counted as completion (they are billed as output); None when it reported none."""
    meta = getattr(response, "usage_metadata", None)
    if meta is None:
        return None
    usage = TokenUsage.reported(meta.prompt_token_count, meta.candidates_token_count, meta.total_token_count)
    usage.completion += token_count(meta.thoughts_token_count)
    return usage


def count_call(usage: CallUsage, response: types.GenerateContentResponse) -> None:
    """Count one response in ``usage`` (as :func:`usage_of` reads it)."""
    reported = usage_of(response)
    if reported is None:
        usage.add_call(0, 0, 0, reported=False)
    else:
        usage.add_call(reported.prompt, reported.completion, reported.total)


def generate(client: genai.Client, model: str, contents: types.ContentListUnionDict,
             config: types.GenerateContentConfig | None, *, endpoint: str | None, timeout_s: float) -> types.GenerateContentResponse:
    """``client.models.generate_content``, ending within ``timeout_s`` (and by the deadline)
    however slowly the reply comes, with every failure mapped to
    :class:`~evalbench.clients.calls.CallFailed` (retryable or not).

    The SDK's own timeout is per read, and with Vertex AI it may not use our transport at all
    (google-auth's requests session, token refreshes): the call runs where it can be abandoned
    at the deadline. With our transport (not Vertex AI) the abandoned call also ends by then."""
    from google.genai import errors as genai_errors

    def call() -> types.GenerateContentResponse:
        return client.models.generate_content(model=model, contents=contents, config=config)

    try:
        with deadline.capped(timeout_s):
            return deadline.call_abandoned_at_deadline(call, "a Gemini API call")
    except deadline.Expired:
        if deadline.passed():
            raise CallFailed("no complete answer before the conversation deadline", "timeout") from None
        raise CallFailed(f"no complete answer within {timeout_s} s", "timeout") from None
    except genai_errors.APIError as exc:
        raise api_failure(exc) from None
    except Exception as exc:  # noqa: BLE001 (every failure becomes a CallFailed, retryable or not)
        failure = transport_failure(exc, endpoint or "the Gemini API", timeout_s)
        if failure is not None:
            raise failure from None
        if isinstance(exc, ValueError):  # JSON that does not parse, or does not fit the response model
            raise CallFailed(f"malformed response: {type(exc).__name__}: {exc}", "protocol") from None
        raise CallFailed(f"{type(exc).__name__}: {exc}", "exception") from None


def api_failure(exc: genai_errors.APIError) -> CallFailed:
    """A google-genai API error as :class:`~evalbench.clients.calls.CallFailed`: retryable (with the
    server's delay) for the statuses our retries handle (429, 503, ...)."""
    code = int(exc.code or 0)
    message = f"HTTP {code} {exc.status or ''}: {exc.message or exc.details}"[:BODY_KEPT]
    if code in RETRY_STATUSES:
        return CallFailed(message, f"http_{code}", retryable=True, retry_after=_retry_after(exc))
    return CallFailed(message, f"http_{code}")


def _retry_after(exc: genai_errors.APIError) -> float | None:
    """``Retry-After``, else the ``RetryInfo.retryDelay`` of a Google API error body."""
    headers = getattr(exc.response, "headers", None)
    if headers is not None:
        try:
            seconds = parse_retry_after(headers.get("retry-after"))
        except AttributeError:
            seconds = None
        if seconds is not None:
            return seconds
    details = exc.details if isinstance(exc.details, dict) else {}
    error = details.get("error", details) if isinstance(details.get("error", details), dict) else {}
    for detail in error.get("details") or []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("RetryInfo"):
            match = _DURATION.match(str(detail.get("retryDelay", "")))
            if match:
                return float(match.group(1))
    return None
