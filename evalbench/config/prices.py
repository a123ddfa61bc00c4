"""What model calls cost: the price table (USD per 1M input and output tokens, per model) and
how a run prices the usage of each role (the agent, the virtual user, each judge).

The built-in prices (:data:`DEFAULT_PRICES`) are list prices of the models the project's docs
and configs name, as of :data:`PRICES_AS_OF`, from the provider's public price page (standard
paid tier, prompts up to 200k tokens, no context caching, no batch discount). They are defaults
to check, not a quote: override or add models with the config's ``prices:`` key. A model with no
price has its tokens counted and its cost **unknown** (``null``), never 0.

cost = prompt tokens × input price / 1e6 + completion tokens × output price / 1e6, where the
completion tokens include thinking tokens (Gemini bills them as output).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import Field, field_validator

from evalbench.config.types import StrictModel

PRICES_AS_OF = "2026-12-05"
PRICES_SOURCE = "the provider's public price page (standard tier, prompts up to 200k tokens); override in config (prices:)"


class ModelPrice(StrictModel):
    """One model's price: USD per 1M tokens."""

    input: float = Field(ge=0, description="USD per 1M input (prompt) tokens")
    output: float = Field(ge=0, description="USD per 1M output (completion and thinking) tokens")

    @field_validator("input", "output")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("a finite number of USD per 1M tokens")
        return value


# Gemini API list prices (ai.google.dev/gemini-api/docs/pricing), as of PRICES_AS_OF: defaults to check.
DEFAULT_PRICES: dict[str, ModelPrice] = {
    "gemini-2.5-pro": ModelPrice(input=1.25, output=10.00),
    "gemini-2.5-flash": ModelPrice(input=0.30, output=2.50),
    "gemini-2.5-flash-lite": ModelPrice(input=0.10, output=0.40),
    "gemini-2.0-flash": ModelPrice(input=0.10, output=0.40),
    "gemini-2.0-flash-lite": ModelPrice(input=0.075, output=0.30),
}


def model_key(model: str) -> str:
    """The name a model is priced by: google-genai's ``models/<name>`` (and Vertex AI's
    ``publishers/google/models/<name>``) is ``<name>``; anything else is exact."""
    return model.rsplit("models/", 1)[-1] if "models/" in model else model


class PriceTable:
    """The built-in prices with the config's ``prices:`` over them (model by model)."""

    def __init__(self, overrides: dict[str, ModelPrice] | None = None) -> None:
        self.overrides = {model_key(k): v for k, v in (overrides or {}).items()}
        self.prices = DEFAULT_PRICES | self.overrides

    def price(self, model: str | None) -> ModelPrice | None:
        return None if model is None else self.prices.get(model_key(model))

    def cost(self, model: str | None, prompt: int, completion: int) -> float | None:
        """USD of these tokens; 0 when there are none; None when they are not priced."""
        if prompt == 0 and completion == 0:
            return 0.0  # nothing was spent, whatever the model
        price = self.price(model)
        if price is None:
            return None
        return round((prompt * price.input + completion * price.output) / 1e6, 8)

    def describe(self) -> dict[str, object]:
        """What the manifest records: the table used, and where each price came from."""
        return {"currency": "USD", "unit": "per 1M tokens", "defaults_as_of": PRICES_AS_OF, "source": PRICES_SOURCE,
                "models": {m: p.model_dump() | {"from": "config" if m in self.overrides else "default"}
                           for m, p in sorted(self.prices.items())}}


@dataclass(frozen=True)
class RunPricing:
    """How a run prices its conversations' usage: the table, the agent's model (the agent's
    replies report tokens, not the model) and the roles replayed from another run (rescore)."""

    table: PriceTable
    agent_model: str | None = None
    replayed: frozenset[str] = frozenset()


def run_pricing(prices: dict[str, ModelPrice] | None, agent: dict[str, object], vuser: dict[str, object]) -> RunPricing:
    """The pricing of a run from its config's ``prices`` and the agent's and virtual user's
    ``describe()``: a replay agent prices the recorded agent's tokens with that agent's model."""
    recorded = agent.get("recorded")
    model = agent.get("model") or (recorded.get("model") if isinstance(recorded, dict) else None)
    replayed = {role for role, replay in (("agent", agent.get("agent") == "replay"), ("vuser", "replayed_from" in vuser))
                if replay}
    return RunPricing(PriceTable(prices), model if isinstance(model, str) else None, frozenset(replayed))
