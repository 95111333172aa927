"""What a continuation cost in money: its model calls' tokens at the price a maintained table (the `genai-prices`
package, its bundled snapshot: no network) gives for the model the agent's configuration names in kagent's
`agent` table. Unknown, never a guess: an agent without a row or a model, a provider this module does not map,
an OpenAI-type model served from another base URL (a local or proxied model: not OpenAI's price), or a model the
table does not know, is priced None.

Each model call is priced on its own (the usage of one event), as providers bill one request: a table's price
tiers (a longer prompt priced higher) apply to a request, not to a turn's sum. (A price without tiers is linear
in the tokens: the calls' sums are priced once, the same number.)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import lru_cache

from service.kagent.store.agents import ModelConfig

# kagent's model provider types (its ModelConfig `type`, kagent-adk's ModelUnion) -> genai-prices' provider ids.
# Not mapped, so unknown: "ollama" (a local model: no price per token), "sap_ai_core" (SAP's own contract prices),
# and any type kagent adds later.
PROVIDERS = {
    "openai": "openai",
    "azure_openai": "azure",
    "anthropic": "anthropic",
    "gemini": "google",
    "gemini_vertex_ai": "google",
    "gemini_anthropic": "google",  # Claude on Vertex AI: genai-prices lists Google's Claude models
    "bedrock": "aws",
}
_OPENAI_URLS = ("", "https://api.openai.com/v1", "https://api.openai.com/v1/", "https://api.openai.com")


@dataclass(frozen=True, kw_only=True)
class Priced:
    """A priced model: `provider` genai-prices' id, `model` the name as the agent's configuration gives it."""

    provider: str
    model: str


def priced_model(config: ModelConfig | None) -> Priced | None:
    """The model to price, or None when its price cannot be known (see the module's doc)."""
    if config is None or not config.model or config.type not in PROVIDERS:
        return None
    if config.type == "openai" and (config.base_url or "").strip() not in _OPENAI_URLS:
        return None
    return Priced(provider=PROVIDERS[config.type], model=config.model)


@lru_cache(maxsize=8192)
def _price(provider: str, model: str, input_tokens: int, output_tokens: int, day: date) -> Decimal | None:
    """The table's price today (`day`: the cache's key, so that a long-running service follows a dated change)."""
    import genai_prices  # heavy (its whole table): loaded on the first price asked for

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an unknown usage key is a warning there; ours are its own two
            usage = genai_prices.Usage(input_tokens=input_tokens, output_tokens=output_tokens)
            return genai_prices.calc_price(usage, model, provider_id=provider).total_price
    except LookupError:  # a provider or a model the table does not know
        return None


@lru_cache(maxsize=1024)
def _tiered(provider: str, model: str, day: date) -> bool:
    """Whether the model's price has tiers (a request's price per token depends on its size): then each call is
    priced on its own; else a price is linear in the tokens, and the calls' sums are priced once (the same
    number, at a fraction of the time: a grid of 8 columns of 10 turns is read every 700 ms while it runs)."""
    import genai_prices
    from genai_prices.types import TieredPrices

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        usage = genai_prices.Usage(input_tokens=0, output_tokens=0)
        prices = genai_prices.calc_price(usage, model, provider_id=provider).model_price
    return any(isinstance(v, TieredPrices) for v in vars(prices).values())


def cost_usd(model: Priced | None, calls: Sequence[tuple[int, int]] | None) -> float | None:
    """The price in US dollars of these model calls, each (input tokens, output tokens), to the micro-dollar;
    None when the model or its price is unknown, or the calls' usage was not counted."""
    today = datetime.now(UTC).date()
    if model is None or calls is None or _price(model.provider, model.model, 0, 0, today) is None:
        return None
    if not _tiered(model.provider, model.model, today):
        calls = [(sum(i for i, _ in calls), sum(o for _, o in calls))]
    total = Decimal(0)
    for input_tokens, output_tokens in calls:
        price = _price(model.provider, model.model, input_tokens, output_tokens, today)
        if price is None:
            return None
        total += price
    return round(float(total), 6)


def usd_text(amount: float | None) -> str:
    """Money as every door prints it (the one place that rounds it): US dollars to two significant figures, never
    fewer than the cents ($0.000070, $0.0045, $0.012, $0.10, $12.30); "unknown" when it is not known. A demo's or a
    short turn's price is fractions of a cent: rounding those to a fixed number of places would print $0.000070 and
    $0.000090 both as $0.0001, and a float's own text says 9e-05."""
    if amount is None:
        return "unknown"
    if amount <= 0:
        return "$0.00"
    return f"${amount:.{max(2, 1 - math.floor(math.log10(amount)))}f}"
