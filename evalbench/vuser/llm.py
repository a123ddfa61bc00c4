"""BIRD-Interact's two-stage virtual user with a Gemini model (``vuser: llm``).

**Encode.** The model reads the item's annotated ambiguities, the golden SQL split into clauses
and the agent's question, and answers with exactly one action::

    labeled("<term>")            labeled("<term 1>", "<term 2>")
    unlabeled("<sql segment>")
    unanswerable()

EvalBench's grammar is read too (:func:`evalbench_unwrap`): the action inside ``<s>...</s>``
(text before ``<s>`` dropped, a lone ``</s>`` closing it), a ``<think>`` block dropped, the
action in bold (``**labeled("t")**``), several ``labeled(...)`` merged into one. What remains is
parsed strictly (:func:`parse_action`): the whole completion is one action
(only surrounding whitespace, backticks or one code fence are tolerated); arguments are
double-quoted strings in which ``\\"`` is a quote and ``\\\\`` a backslash (any other backslash
stays as written). The action is then validated (:func:`validate_action`): each term must be a
term shown to the model — the item's ``critical`` and ``knowledge`` ambiguities — matched
case- and whitespace-insensitively and rewritten to the annotated spelling; a segment must be,
whitespace, case and spacing around punctuation ignored, a substring of a golden clause or of a
golden SQL of the current phase. An unparsable or invalid action is sent back to the model with
the reason (the conversation grows by the bad completion and a correction request) up to
``invalid_action_retries`` times; then the reply is an error (``invalid action: ...``), which the
pipeline records as outcome ``vuser_error``.

``base_prompt`` (EvalBench's model-config key) is put before every encode and decode prompt.

**Decode.** The reply is taken out of EvalBench's ``<s>...</s>`` tags. For ``unanswerable()`` no model call: the fixed refusal of the rules virtual user
(:data:`evalbench.vuser.rules.REFUSAL`). Otherwise the model reads the action, the agent's
question and the clear query (for a ``labeled`` term with a knowledge entry, also that entry)
and writes the user's reply. The reply is audited (:func:`evalbench.vuser.audit.audit_reply`);
with ``block_leaks`` a leaking reply is sent back once with the leaks named, the second reply is
kept and audited again, and the audit records both (``regenerated``, ``first_leaks``); should
that second call fail, the first reply is kept with its leaks (and ``regeneration_error``).

**Prompts.** Two templates, ``encode_prompt`` and ``decode_prompt`` (defaults
``prompts/vuser_encode.txt`` and ``prompts/vuser_decode.txt``), whose placeholders are replaced
literally, as :meth:`str.replace` would but in one pass (other braces are left alone, and a value
holding a placeholder, e.g. in the agent's question, is not expanded). Each is sent as the single
user message, with no system instruction. Placeholders of the encode template:

- ``{question}`` (required): the agent's clarification question;
- ``{ambiguities}``: one line per ``critical`` / ``knowledge`` ambiguity of the item:
  ``- "<term>" -> <sql snippet> (<type>)``, or ``(none)``;
- ``{golden_clauses}``: the clauses of each golden SQL of the phase
  (:func:`evalbench.sql.clauses.golden_clauses`), one per line.

Placeholders of the decode template:

- ``{action}`` (required): the validated action, as ``labeled("...")`` / ``unlabeled("...")``;
- ``{question}``: the agent's clarification question;
- ``{clear_query}``: the fully specified question of the phase (the item's clear question in
  the main phase, the follow-up question in the follow-up phase);
- ``{knowledge}``: for labeled terms whose ambiguity cites a knowledge entry present in
  ``knowledge[item.database]``, a short section with each entry's name, description and prose
  definition; otherwise empty.

The ambiguities are the item's in both phases (as in the rules virtual user); the golden SQL
and the clear query are the current phase's. ``describe()`` records each prompt's path and the
first 16 hex digits of its SHA-256, so a run's manifest names the prompts it used.

**Model calls.** google-genai as in :mod:`evalbench.agents.gemini` (API key from
``api_key_env``, or Vertex AI; ``base_url`` for a proxy or a local fake; the SDK's own retries
off). ``temperature`` and ``seed`` (default: the run seed) go in every generation config. A call
that fails for a reason that may pass — 429, 500, 503, 504, a connection error, a timeout, an
empty completion, a malformed response — is retried with
:func:`~evalbench.clients.limits.backoff_delay` (``Retry-After`` honoured) up to
``retry.max_retries`` times; other failures (another HTTP status, a blocked prompt) are not.
When a step cannot complete, :meth:`LlmVirtualUser.answer` returns an error reply; it never
raises. Every reply's audit lists the model calls made (``calls``) and the raw encode output
(``encode_raw``); its ``usage`` sums the token usage every response reported (an error reply's
too: those calls were made), which the journal reports as the role ``vuser``.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
import time
from pathlib import Path

from google.genai import types

from evalbench.clients.calls import CallFailed, truncate
from evalbench.clients.genai import count_call, generate, make_genai_client, response_text
from evalbench.clients.limits import CallLimiter, backoff_delay
from evalbench.config import LlmVUserConfig
from evalbench.config.agents import default_prompt
from evalbench.core import deadline
from evalbench.core.conversation import Conversation, VUserAction, VUserReply
from evalbench.core.errors import ConfigError
from evalbench.core.redaction import redact_url
from evalbench.core.usage import CallUsage
from evalbench.dataset import Ambiguity
from evalbench.dataset.knowledge import Knowledge
from evalbench.sql.clauses import golden_clauses
from evalbench.sql.statements import sqlglot_dialect
from evalbench.vuser.audit import audit_reply
from evalbench.vuser.rules import REFUSAL

log = logging.getLogger(__name__)

ENCODE_PROMPT = "vuser_encode.txt"
DECODE_PROMPT = "vuser_decode.txt"
OUTPUT_KEPT = 2_000  # characters of a completion kept in the audit
# Failures of one model call that may pass when the call is sent again (a vuser call has no side effects).
_RETRYABLE_KINDS = frozenset({"connection", "timeout", "empty", "protocol", "http_429", "http_500", "http_503", "http_504"})


# --------------------------------------------------------------------------- the action grammar


class InvalidAction(ValueError):
    """A completion that is not exactly one valid action; the message says why."""


_NAME = re.compile(r"(labeled|unlabeled|unanswerable)\s*\(", re.IGNORECASE)
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n?(.*?)\n?```$", re.DOTALL)


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_BOLD = re.compile(r"\*\*\s*((?:labeled|unlabeled|unanswerable)\s*\(.*?\))\s*\*\*", re.DOTALL | re.IGNORECASE)


def evalbench_unwrap(text: str) -> str:
    """EvalBench's reply grammar (BIRD-Interact's): the answer inside ``<s>...</s>`` — text before
    ``<s>`` (reasoning) and from ``</s>`` on is dropped, and ``</s>`` alone closes an answer whose
    ``<s>`` ended the prompt (``util/interactutil.py::extract_user_response``); a ``<think>``
    block is dropped; ``**labeled("...")**`` (bold, as EvalBench's data-agent encode prompt
    writes its examples) is the action inside."""
    body = _THINK.sub("", text or "")
    end = body.find("</s>")
    if end != -1:
        body = body[:end]
    start = body.find("<s>")
    if start != -1:
        body = body[start + len("<s>"):]
    return _BOLD.sub(lambda m: m.group(1), body).strip()


def _merge_labeled(body: str) -> str:
    """Several ``labeled(...)`` actions, as EvalBench's data-agent prompt asks for ("return as
    many as detected ambiguities"), as one ``labeled(...)`` of all their terms."""
    actions = _LABELED_ONLY.findall(body)
    if len(actions) > 1 and _LABELED_ONLY.sub("", body).strip(" ,;\n\t") == "":
        return "labeled(" + ", ".join(a.strip() for a in actions) + ")"
    return body


_LABELED_ONLY = re.compile(r"labeled\s*\((\s*\"(?:[^\"\\]|\\.)*\"(?:\s*,\s*\"(?:[^\"\\]|\\.)*\")*\s*)\)", re.IGNORECASE)


def _unwrap(text: str) -> str:
    body = _merge_labeled(evalbench_unwrap(text))
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if len(body) >= 2 and body[0] == body[-1] == "`":
        body = body.strip("`").strip()
    return body


def _string(body: str, pos: int) -> tuple[str, int]:
    """The double-quoted string starting at ``body[pos]`` and the position after it."""
    out: list[str] = []
    i = pos + 1
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body) and body[i + 1] in '"\\':
            out.append(body[i + 1])
            i += 2
        elif char == '"':
            return "".join(out), i + 1
        else:
            out.append(char)
            i += 1
    raise InvalidAction("unterminated string (a double quote inside an argument must be written \\\")")


def _skip_space(body: str, pos: int) -> int:
    while pos < len(body) and body[pos].isspace():
        pos += 1
    return pos


def parse_action(text: str) -> VUserAction:
    """Exactly one action, read strictly (grammar in the module docstring). Raises :class:`InvalidAction`."""
    body = _unwrap(text or "")
    if not body:
        raise InvalidAction("empty completion")
    match = _NAME.match(body)
    if match is None:
        raise InvalidAction("the reply must be exactly one of labeled(...), unlabeled(...) or unanswerable(), and nothing else")
    kind = match.group(1).lower()
    pos = _skip_space(body, match.end())
    args: list[str] = []
    if pos < len(body) and body[pos] == ")":
        pos += 1
    else:
        while True:
            if pos >= len(body) or body[pos] != '"':
                raise InvalidAction(f"{kind}(): expected a double-quoted argument at {body[pos:pos + 20]!r}")
            value, pos = _string(body, pos)
            args.append(value)
            pos = _skip_space(body, pos)
            if pos < len(body) and body[pos] == ",":
                pos = _skip_space(body, pos + 1)
                continue
            if pos < len(body) and body[pos] == ")":
                pos += 1
                break
            raise InvalidAction(f"{kind}(): expected ',' or ')' after an argument, got {body[pos:pos + 20]!r} "
                                "(a double quote inside an argument must be written \\\")")
    rest = body[pos:].strip()
    if rest:
        if _NAME.search(rest):
            raise InvalidAction("more than one action: reply with exactly one")
        raise InvalidAction(f"text after the action: {rest[:40]!r}")
    if kind == "unanswerable":
        if args:
            raise InvalidAction("unanswerable() takes no argument")
        return VUserAction("unanswerable")
    if kind == "unlabeled":
        if len(args) != 1:
            raise InvalidAction(f"unlabeled() takes exactly one SQL segment, got {len(args)}")
        return VUserAction("unlabeled", segment=args[0])
    if not args:
        raise InvalidAction("labeled() needs at least one term")
    return VUserAction("labeled", terms=args)


def _norm_text(text: str) -> str:
    return " ".join(text.lower().split())


_PUNCT_SPACE = re.compile(r"\s*([^\w\s])\s*")


def _norm_sql(sql: str) -> str:
    """Lower case, one space between words, none around punctuation, no trailing semicolon."""
    return _PUNCT_SPACE.sub(r"\1", _norm_text(sql)).rstrip(";").strip()


def asked_ambiguities(conversation: Conversation) -> list[Ambiguity]:
    """The ambiguities the encode step knows about: the item's critical and knowledge ones."""
    return [a for a in conversation.item.ambiguities if a.kind != "non_critical"]


def validate_action(action: VUserAction, conversation: Conversation) -> VUserAction:
    """``action`` with its terms in their annotated spelling; raises :class:`InvalidAction`."""
    if action.kind == "labeled":
        known = {_norm_text(a.term): a.term for a in asked_ambiguities(conversation)}
        terms: list[str] = []
        for term in action.terms:
            annotated = known.get(_norm_text(term))
            if annotated is None:
                listed = ", ".join(f'"{t}"' for t in known.values()) or "none"
                raise InvalidAction(f'unknown term "{term}" (the terms are: {listed})')
            if annotated not in terms:
                terms.append(annotated)
        return VUserAction("labeled", terms=terms)
    if action.kind == "unlabeled":
        segment = (action.segment or "").strip()
        wanted = _norm_sql(segment)
        if not re.search(r"\w", wanted):
            raise InvalidAction("unlabeled() needs a SQL segment, copied from one clause")
        golden = conversation.phase.golden_sql
        dialect = sqlglot_dialect(conversation.item.dialect)
        haystacks = [clause for sql in golden for clause in golden_clauses(sql, dialect)] + list(golden)
        if not any(wanted in _norm_sql(h) for h in haystacks):
            raise InvalidAction(f'the segment "{truncate(segment, 80)}" is not part of the correct SQL: copy it from one clause')
        return VUserAction("unlabeled", segment=segment)
    return action


# --------------------------------------------------------------------------- prompts


def _load_prompt(path: Path | None, default: str, key: str, required: str) -> tuple[Path, str]:
    path = path or default_prompt(default)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError(f"cannot read the prompt {path}: {exc}", key=f"vuser_model_config.{key}") from None
    if required not in text:
        raise ConfigError(f"the prompt {path} lacks the placeholder {required}", key=f"vuser_model_config.{key}")
    return path, text


def render(template: str, values: dict[str, str]) -> str:
    """``template`` with each ``{name}`` of ``values`` replaced, in one pass: a value (the agent's
    question, say) that contains a placeholder is inserted as it is, never expanded."""
    if not values:
        return template
    pattern = re.compile("|".join(re.escape("{" + name + "}") for name in values))
    return pattern.sub(lambda m: values[m.group(0)[1:-1]], template)


def _clear_query(conversation: Conversation) -> str:
    return conversation.item.question if conversation.phase.phase.value == "main" else conversation.phase.question


def encode_values(conversation: Conversation, question: str) -> dict[str, str]:
    lines = []
    for a in asked_ambiguities(conversation):
        lines.append(f'- "{a.term}" -> {a.sql_snippet or "(no SQL snippet)"} ({a.type or a.kind})')
    clauses = []
    for n, sql in enumerate(conversation.phase.golden_sql, start=1):
        if len(conversation.phase.golden_sql) > 1:
            clauses.append(f"(correct SQL #{n})")
        clauses.extend(f"- {clause}" for clause in golden_clauses(sql, sqlglot_dialect(conversation.item.dialect)))
    return {"ambiguities": "\n".join(lines) or "(none)", "golden_clauses": "\n".join(clauses), "question": question}


def knowledge_section(conversation: Conversation, action: VUserAction, knowledge: Knowledge) -> str:
    if action.kind != "labeled":
        return ""
    entries = knowledge.get(conversation.item.database, {})
    lines = []
    for term in action.terms:
        ambiguity = next((a for a in conversation.item.ambiguities if a.term == term), None)
        entry = entries.get(ambiguity.knowledge_id) if ambiguity is not None and ambiguity.knowledge_id is not None else None
        if entry is None:
            continue
        prose = entry.definition[-1] if len(entry.definition) > 1 else ""  # the first line is often a formula
        lines.append(f'- "{term}" is the company term "{entry.name}": {entry.description} {prose}'.rstrip())
    if not lines:
        return ""
    return "\nWhat your company's glossary says about it:\n" + "\n".join(lines) + "\n"


def decode_values(conversation: Conversation, question: str, action: VUserAction, knowledge: Knowledge) -> dict[str, str]:
    return {
        "action": str(action),
        "question": question,
        "clear_query": _clear_query(conversation),
        "knowledge": knowledge_section(conversation, action, knowledge),
    }


# --------------------------------------------------------------------------- the virtual user


class _StepFailed(Exception):
    """A step (encode or decode) that could not complete; the message becomes the reply's error."""


def _user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def _model(text: str) -> types.Content:
    return types.Content(role="model", parts=[types.Part(text=text)])


class LlmVirtualUser:
    name = "llm"

    def __init__(self, config: LlmVUserConfig, run_seed: int, knowledge: Knowledge) -> None:
        self.config = config
        self.knowledge = knowledge
        self.patience = config.patience
        self.seed = config.seed if config.seed is not None else run_seed
        self.encode_path, self.encode_template = _load_prompt(config.encode_prompt, ENCODE_PROMPT, "encode_prompt", "{question}")
        self.decode_path, self.decode_template = _load_prompt(config.decode_prompt, DECODE_PROMPT, "decode_prompt", "{action}")
        self.limiter = CallLimiter(config.execs_per_minute, config.max_concurrency)
        self.rng = random.Random(self.seed)  # backoff jitter only
        made = make_genai_client(config, who="llm virtual user", config_key="vuser_model_config")
        self.client, self.project, self.location = made.client, made.project, made.location
        self.generation = types.GenerateContentConfig(temperature=config.temperature, seed=self.seed)

    @property
    def endpoint(self) -> str | None:
        return redact_url(self.config.base_url) if self.config.base_url else None

    def describe(self) -> dict[str, object]:
        c = self.config
        return {
            "vuser": self.name, "model": c.model, "base_url": self.endpoint, "vertexai": c.vertexai,
            "project": self.project, "location": self.location, "temperature": c.temperature, "seed": self.seed,
            "patience": c.patience, "block_leaks": c.block_leaks, "invalid_action_retries": c.invalid_action_retries,
            "encode_prompt": str(self.encode_path), "encode_prompt_sha256": _sha(self.encode_template),
            "decode_prompt": str(self.decode_path), "decode_prompt_sha256": _sha(self.decode_template),
            "timeout_s": c.timeout_s, "execs_per_minute": c.execs_per_minute, "max_concurrency": c.max_concurrency,
            "retry": c.retry.model_dump(),
        }

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ the VirtualUser protocol

    def answer(self, conversation: Conversation, question: str) -> VUserReply:
        """Encode, validate, decode, audit. Never raises: a failure is an error reply."""
        calls: list[dict[str, object]] = []
        audit: dict[str, object] = {"calls": calls, "encode_raw": None}
        usage = CallUsage(model=self.config.model)  # every response counts, failed answers' too
        try:
            return self._answer(conversation, question, audit, calls, usage)
        except _StepFailed as failure:
            return VUserReply(action=None, text="", error=str(failure), audit={"leaks": []} | audit, usage=usage)
        except Exception as exc:  # a bug: still an error reply, never raised into the pipeline
            log.warning("llm virtual user: answering failed", exc_info=True)
            return VUserReply(action=None, text="", error=f"{type(exc).__name__}: {exc}", audit={"leaks": []} | audit,
                              usage=usage)

    def _answer(self, conversation: Conversation, question: str, audit: dict[str, object], calls: list[dict[str, object]],
                usage: CallUsage) -> VUserReply:
        """``calls``: the list ``audit["calls"]`` holds."""
        action = self._encode(conversation, question, audit, calls, usage)
        if action.kind == "unanswerable":
            text = REFUSAL
            return VUserReply(action=action, text=text, audit=audit_reply(text, conversation, action) | audit, usage=usage)
        prompt = render(self.decode_template, decode_values(conversation, question, action, self.knowledge))
        contents = [_user(self.config.base_prompt + prompt)]
        text = evalbench_unwrap(self._step("decode", contents, calls, usage)) or REFUSAL
        leaks = audit_reply(text, conversation, action)
        found: dict[str, object] = dict(leaks)
        if leaks["leaks"] and self.config.block_leaks:
            first = leaks["leaks"]
            contents += [_model(text), _user(_leak_feedback(first))]
            try:
                text = evalbench_unwrap(self._step("decode", contents, calls, usage)) or text
            except _StepFailed as failure:  # keep the first reply, its leaks recorded
                return VUserReply(action=action, text=text, audit=found | {"regeneration_error": str(failure)} | audit,
                                  usage=usage)
            found = audit_reply(text, conversation, action) | {"regenerated": True, "first_leaks": first}
        return VUserReply(action=action, text=text, audit=found | audit, usage=usage)

    def _encode(self, conversation: Conversation, question: str, audit: dict[str, object], calls: list[dict[str, object]],
                usage: CallUsage) -> VUserAction:
        # base_prompt: EvalBench's Gemini generator puts it before every prompt (generators/models/gemini.py)
        contents = [_user(self.config.base_prompt + render(self.encode_template, encode_values(conversation, question)))]
        attempts = self.config.invalid_action_retries + 1
        for attempt in range(attempts):
            raw = self._step("encode", contents, calls, usage)
            audit["encode_raw"] = truncate(raw, OUTPUT_KEPT)
            try:
                return validate_action(parse_action(raw), conversation)
            except InvalidAction as exc:
                reason = str(exc)
                calls[-1]["invalid"] = reason
            if attempt + 1 < attempts:
                contents += [_model(raw), _user(_action_feedback(reason))]
        raise _StepFailed(f"invalid action: {reason} (after {attempts} encode attempts)")

    def _step(self, step: str, contents: list[types.Content], calls: list[dict[str, object]], usage: CallUsage) -> str:
        """One model call with retries, each response counted in ``usage``; the completion's
        text. Raises :class:`_StepFailed`."""
        retry = self.config.retry
        for attempt in range(retry.max_retries + 1):
            started = time.perf_counter()
            record: dict[str, object] = {"step": step}
            try:
                with self.limiter.slot() as waited:
                    try:
                        text = self._call(contents, usage)
                        failure = None
                    except CallFailed as exc:
                        failure = exc
            except deadline.Expired as exc:  # waiting for the limiter took the whole deadline
                calls.append(record | {"status": "timeout", "error": str(exc)})
                raise _StepFailed(f"{step} failed: {exc}") from None
            record["seconds"] = round(time.perf_counter() - started - waited, 3)
            if failure is None:
                record["status"] = "ok"
                if step == "encode":
                    record["output"] = truncate(text, OUTPUT_KEPT)
                calls.append(record)
                return text
            record |= {"status": failure.kind, "error": str(failure)}
            calls.append(record)
            retryable = failure.retryable or failure.kind in _RETRYABLE_KINDS
            if not retryable or attempt == retry.max_retries or deadline.passed():
                suffix = f" (after {attempt + 1} attempts)" if retryable else ""
                raise _StepFailed(f"{step} failed: {failure}{suffix}")
            delay = backoff_delay(attempt, retry.backoff_s, retry.max_backoff_s, failure.retry_after, self.rng)
            log.info("llm virtual user: %s: %s; retrying in %.2f s", step, failure, delay)
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _call(self, contents: list[types.Content], usage: CallUsage) -> str:
        """One generate_content call, its response counted in ``usage`` (an empty completion
        was billed too): the completion's text. Raises :class:`CallFailed`."""
        response = generate(self.client, self.config.model, contents, self.generation,
                            endpoint=self.endpoint, timeout_s=self.config.timeout_s)
        count_call(usage, response)
        return response_text(response)

    def probe(self, timeout_s: float) -> str:
        """Preflight: credentials present, and a ``base_url`` (if any) accepts connections."""
        from evalbench.clients.probes import genai_probe

        return genai_probe(self.config, self.project, self.endpoint, "vuser_model_config", timeout_s)


def _action_feedback(reason: str) -> str:
    return (f"That is not a valid action: {reason}.\n"
            'Reply again with exactly one action: labeled("<term>"), unlabeled("<sql segment>") or unanswerable(), and nothing else.')


def _leak_feedback(leaks: list[str]) -> str:
    return (f"Your reply gives the answer away ({'; '.join(leaks)}). Write it again: answer the question in plain words, "
            "with no SQL and without repeating your precise request. Write the answer alone.")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def build_llm_vuser(config: LlmVUserConfig, run_seed: int, knowledge: Knowledge) -> LlmVirtualUser:
    return LlmVirtualUser(config, run_seed, knowledge)
