"""An estimate of what a session cost, from the token counts the API reports, shown to the user.

Prices are US dollars per million tokens as Anthropic lists them; prompt-cache writes cost 1.25× the
input price and cache reads 0.1×. A self-hosted model behind an OpenAI-compatible API costs nothing per
token here. A model not in the table is priced as the default model, and the estimate says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cuda_agent.agent.llm.transcript import Usage

CACHE_WRITE = 1.25
CACHE_READ = 0.10


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float
    note: str = ""  # why this price is a guess


# First match wins: the older, pricier Opus 4 and 4.1 before the later Opus.
_TABLE: tuple[tuple[re.Pattern[str], Price], ...] = (
    (re.compile(r"claude-fable"), Price(10.0, 50.0)),
    (re.compile(r"claude-opus-4(-0|-1)?($|-\d{8})"), Price(15.0, 75.0)),
    (re.compile(r"claude-opus-5-5"), Price(4.0, 20.0)),
    (re.compile(r"claude-opus"), Price(5.0, 25.0)),
    (re.compile(r"claude-sonnet-5"), Price(2.0, 10.0)),
    (re.compile(r"claude-(3-7-)?sonnet|claude-sonnet"), Price(3.0, 15.0)),
    (re.compile(r"claude-3-5-haiku"), Price(0.8, 4.0)),
    (re.compile(r"claude-haiku-4"), Price(1.0, 5.0)),
)
# Over- rather than under-estimated, so that the cost budget stops a session early rather than late.
_UNKNOWN = Price(
    10.0, 50.0, "priced as Claude Fable, the priciest current model: the model is not in the price table"
)
_SELF_HOSTED = Price(0.0, 0.0, "self-hosted: no per-token price")


def price_of(provider: str, model: str) -> Price:
    if provider != "anthropic":
        return _SELF_HOSTED
    return next((price for pattern, price in _TABLE if pattern.match(model)), _UNKNOWN)


def cost_usd(price: Price, usage: Usage) -> float:
    per_token_in = price.input_per_mtok / 1e6
    return (
        usage.input_tokens * per_token_in
        + usage.cache_write_tokens * per_token_in * CACHE_WRITE
        + usage.cache_read_tokens * per_token_in * CACHE_READ
        + usage.output_tokens * price.output_per_mtok / 1e6
    )
