"""The options a built-in scorer takes, checked by hand: the errors name the scorer's config key
(``scorers.<name>.<option>``)."""

from __future__ import annotations

from collections.abc import Mapping

from evalbench.core.errors import ConfigError

__all__ = ["ScorerOptions", "config_error", "integer", "no_options", "real"]

# What a scorer's factory receives: its options as the run config wrote them (None: none given).
ScorerOptions = Mapping[str, object] | None


def config_error(scorer: str, message: str, option: str | None = None) -> ConfigError:
    key = f"scorers.{scorer}" + (f".{option}" if option else "")
    return ConfigError(f"{scorer}: {message}", key=key)


def no_options(scorer: str, options: ScorerOptions, allowed: tuple[str, ...] = ()) -> None:
    unknown = sorted(set(options or {}) - set(allowed))
    if unknown:
        takes = f"only {', '.join(allowed)}" if allowed else "no options"
        raise config_error(scorer, f"takes {takes}, got {', '.join(unknown)}", unknown[0])


def integer(value: object) -> int:
    """``int(value)`` of an option as the config wrote it: a TypeError for what is neither a
    number nor text (as ``int`` raises), a ValueError for text that is not an integer."""
    if isinstance(value, (int, float, str)):
        return int(value)
    raise TypeError(f"int() argument must be a string, a bytes-like object or a real number, not '{type(value).__name__}'")


def real(value: object) -> float:
    """``float(value)`` of an option as the config wrote it: a TypeError for what is neither a
    number nor text (as ``float`` raises), a ValueError for text that is not a number."""
    if isinstance(value, (int, float, str)):
        return float(value)
    raise TypeError(f"float() argument must be a string or a real number, not '{type(value).__name__}'")
