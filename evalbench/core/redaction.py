"""The one secrets policy: which keys hold secrets, how a value, a URL or a line of text is
redacted, and the secret values this process knows, scrubbed from whatever it writes.

Three layers, each used where it fits:

- :func:`redact` walks a config-shaped value (the manifest's config snapshot, a ``--set`` value,
  the agent's description): a value under a secret-looking key (:func:`is_secret_key`: passwords,
  tokens, keys, cookies, authorization, ... in any spelling, at any depth, in lists too) or under
  ``headers`` becomes ``***``; every string has its URLs redacted.
- :func:`redact_url` / :func:`redact_text` redact free text (log lines, error messages, the
  recorded command line): the password of ``scheme://user:password@``, secret-looking query or
  fragment arguments (``?api_key=``, ``&sig=``, ``#access_token=``), ``KEY=VALUE`` / ``KEY: VALUE``
  pairs under secret-looking keys and ``Bearer``/``Basic`` credentials.
- :func:`remember_secrets` records the secret values of a config as it is loaded (before it is
  validated, so an error message cannot echo one first), and :func:`scrub` removes them from any
  text: the terminal (``evalbench.core.terminal``), the manifest and the journal run every line through
  it, so a secret an agent echoes back, or a library error quotes, is not written either.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
from typing import overload
from urllib.parse import quote, unquote

MASK = "***"

# Spellings that make a key secret wherever they appear in it (after lower-casing and dropping
# separators: "X-Api-Key" -> "xapikey", "clientSecret" -> "clientsecret").
_SECRET_PARTS = ("password", "passwd", "passphrase", "secret", "credential", "authorization", "cookie", "apikey",
                 "privatekey", "accesskey", "signature", "bearer")
# Words that make a key secret when they are a whole word of it ("auth", "x_auth_token", "key", "sig").
_SECRET_WORDS = frozenset({"pwd", "pw", "pass", "auth", "token", "key", "sig", "jwt", "sas", "otp"})
# A last word that makes the key name *where* a secret is, not the secret (api_key_env: the name of
# an environment variable; secret_manager_path, key_file: a path) or a count (max_output_tokens).
_NOT_SECRET_LAST = frozenset({"env", "file", "path", "name", "names", "count", "tokens", "sha256", "hash", "id"})
_CONTAINERS = frozenset({"headers", "header", "http_headers", "extra_headers", "cookies"})  # every value is secret
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def _words(key: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(key)]


def is_secret_key(key: object, *, in_url: bool = False) -> bool:
    """Whether a value under ``key`` is a secret (``password``, ``api_key``, ``X-Api-Key``,
    ``Authorization``, ``Cookie``, ``access_token``, ``client_secret``, ``private_key``,
    ``sig``...), and not the name or the place of one (``api_key_env``, ``secret_manager_path``)
    nor a count (``max_output_tokens``). A bare ``key`` is a secret only as an argument of a URL
    (``?key=``, as Google's APIs take one); in a config it names a config key."""
    words = _words(str(key))
    if not words or words[-1] in _NOT_SECRET_LAST:
        return False
    if words == ["key"]:
        return in_url
    joined = "".join(words)
    return (any(part in joined for part in _SECRET_PARTS) or any(word in _SECRET_WORDS for word in words)
            or joined.endswith("token"))


def _is_container(key: object) -> bool:
    return "_".join(_words(str(key))) in _CONTAINERS


@overload
def redact(value: dict[str, object], key: object = "") -> dict[str, object]: ...
@overload
def redact(value: object, key: object = "") -> object: ...
def redact(value: object, key: object = "") -> object:
    """A copy of ``value`` with every secret replaced by ``***`` (see the module's docstring);
    ``None`` and booleans stay (``bearer_token: false`` says there is none)."""
    if isinstance(value, dict):
        if _is_container(key) or is_secret_key(key):  # headers, or a mapping under a secret key: all of it
            return {k: redact(v, "secret") for k, v in value.items()}
        return {k: redact(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, key) for v in value]
    if value is None or isinstance(value, bool):
        return value
    if is_secret_key(key) or _is_container(key):
        return MASK
    if isinstance(value, str):
        return redact_text(value)
    return value


def secret_path(path: tuple[object, ...] | list[object]) -> bool:
    """Whether a key path (``("model_config", "headers", "X-Team")``) leads to a secret."""
    return any(is_secret_key(k) or _is_container(k) for k in path)


# --------------------------------------------------------------------------- text

_URL = re.compile(r"""[A-Za-z][A-Za-z0-9+.-]*://[^\s'"<>`]+""")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/?#@]*?):([^/?#]*)@")
_ARGUMENT = re.compile(r"(^|[?&;#])([^=&;#?]+)=([^&;#]*)")
# KEY=VALUE, KEY: VALUE, "KEY": "VALUE" (quoted values may hold spaces)
_PAIR = re.compile(r"""(?P<key>[A-Za-z_][\w.-]*)(?P<q>["']?)(?P<sep>\s*[=:]\s*)"""
                   r"""(?P<value>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s,;&}\]'"]+)""")
_CREDENTIAL = re.compile(r"\b(Bearer|Basic|Token|Digest)(\s+)([A-Za-z0-9._~+/=-]{4,})", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with its password (``user:password@``) and every secret-looking argument of its
    query or fragment (``password=``, ``api_key=``, ``access_token=``, ``sig=``, ...) replaced by
    ``***``; the rest of the text exactly as given."""
    if "://" not in url:
        return url
    url = _USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@", url, count=1)
    split = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=-1)
    if split < 0:
        return url

    def argument(match: re.Match[str]) -> str:
        name = unquote(match.group(2))
        return f"{match.group(1)}{match.group(2)}={MASK}" if is_secret_key(name, in_url=True) else match.group(0)

    return url[:split] + _ARGUMENT.sub(argument, url[split:])


def redact_urls(text: str) -> str:
    """Every URL in ``text`` redacted (:func:`redact_url`), the rest as it is."""
    return _URL.sub(lambda m: redact_url(m.group(0)), text) if "://" in text else text


def redact_text(text: str) -> str:
    """Free text with the secrets it shows redacted: URLs (:func:`redact_url`), ``KEY=VALUE`` and
    ``KEY: VALUE`` pairs under secret-looking keys, ``Bearer``/``Basic`` credentials, and the
    secret values this process knows (:func:`scrub`)."""
    text = redact_urls(text)

    def pair(match: re.Match[str]) -> str:
        if not is_secret_key(match.group("key")) or match.group("value").strip("\"'") == MASK:
            return match.group(0)
        value = match.group("value")
        quote_char = value[0] if value[:1] in ("'", '"') and len(value) > 1 and value[-1] == value[0] else ""
        return f"{match.group('key')}{match.group('q')}{match.group('sep')}{quote_char}{MASK}{quote_char}"

    text = _CREDENTIAL.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _PAIR.sub(pair, text)
    return scrub(text)


def redact_arg(arg: str) -> str:
    """One command-line argument as the manifest (or a log) records it.

    ``KEY=VALUE`` (a ``--set`` pair, also as ``--set=KEY=VALUE``): the value is read as YAML, as
    ``--set`` reads it, and redacted under its key at any depth (``password=***``;
    ``model_config={...}`` keeps its other keys, with headers, secret-looking keys and secrets in
    URLs redacted). What is left is redacted as free text (:func:`redact_text`), so YAML that does
    not parse is redacted too; lone surrogates (bytes that were not UTF-8) become U+FFFD."""
    import yaml

    arg = _SURROGATE.sub("\ufffd", arg)
    option, sep, rest = arg.partition("=")
    if sep and option.startswith("-"):  # --set=KEY=VALUE, --output-dir=...
        return f"{option}={redact_arg(rest)}"
    key, sep, value = arg.partition("=")
    if sep and key:
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            parsed = value
        redacted = redact({key: parsed})[key]
        if redacted != parsed:
            value = redacted if isinstance(redacted, str) else json.dumps(redacted, ensure_ascii=False, default=str)
            arg = f"{key}={value}"
    return redact_text(arg)


_SURROGATE = re.compile("[\ud800-\udfff]")


# --------------------------------------------------------------------------- known values


class _Known:
    """The secret values of this process (thread-safe; only ever grows)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values: tuple[str, ...] = ()  # longest first, so a secret is replaced before its parts

    def add(self, value: str) -> None:
        forms = {value, quote(value, safe=""), json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
        with self._lock:
            known = set(self.values) | {f for f in forms if _worth_scrubbing(f)}
            self.values = tuple(sorted(known, key=len, reverse=True))


_KNOWN = _Known()


def _worth_scrubbing(value: str) -> bool:
    """Long enough, and not a plain word or number that the harness's own output also holds (a
    password ``postgres`` must not turn the dialect into ``***``): such a secret is still redacted
    where it is configured, by its key."""
    value = value.strip()
    return len(value) >= 16 or (len(value) >= 6 and not value.isalpha() and not value.isdigit())


def remember_secret(value: object) -> None:
    """Scrub ``value`` (and its URL- and JSON-escaped forms) from everything written from now on;
    for a credential such as ``Bearer abc`` or ``sid=abc``, its last part too."""
    if value is None or isinstance(value, bool):
        return
    text = str(value)
    _KNOWN.add(text)
    for part in re.split(r"[\s=:]+", text)[1:]:
        _KNOWN.add(part)


def remember_secrets(value: object, key: object = "") -> None:
    """Remember every secret of a config-shaped value (what :func:`redact` would replace): values
    under secret-looking keys or ``headers``, passwords and secret arguments of URLs, and the
    value of every environment variable a ``*_env`` key names (``api_key_env: GEMINI_API_KEY``)."""
    if isinstance(value, dict):
        container = _is_container(key) or is_secret_key(key)
        for k, v in value.items():
            remember_secrets(v, "secret" if container else k)
        return
    if isinstance(value, (list, tuple)):
        for v in value:
            remember_secrets(v, key)
        return
    if is_secret_key(key) or _is_container(key):
        remember_secret(value)
    elif isinstance(value, str):
        words = _words(str(key))
        if words and words[-1] == "env" and is_secret_key("_".join(words[:-1])) and value in os.environ:
            remember_secret(os.environ[value])
        for url in _URL.findall(value):
            _remember_url(url)


def _remember_url(url: str) -> None:
    match = _USERINFO.match(url)
    if match:
        user, password = unquote(match.group(2)), unquote(match.group(3))
        remember_secret(match.group(3))
        remember_secret(password)
        # what an HTTP client sends for it (Authorization: Basic ...), should a server echo that
        remember_secret(base64.b64encode(f"{user}:{password}".encode()).decode())
    for arg in _ARGUMENT.finditer(url[url.find("?") + 1:] if "?" in url else ""):
        if is_secret_key(unquote(arg.group(2)), in_url=True):
            remember_secret(arg.group(3))
            remember_secret(unquote(arg.group(3)))


def scrub(text: str) -> str:
    """``text`` with every secret value this process knows replaced by ``***``."""
    for secret in _KNOWN.values:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


@overload
def scrub_value(value: dict[str, object]) -> dict[str, object]: ...
@overload
def scrub_value(value: object) -> object: ...
def scrub_value(value: object) -> object:
    """:func:`scrub` applied to every string (keys too) of a JSON-like value."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub_value(k): scrub_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_value(v) for v in value]
    return value


def knows_secrets() -> bool:
    return bool(_KNOWN.values)
