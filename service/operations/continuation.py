"""What a continuation cost: one definition of its figures, for compare (branches/compare.py) and an
experiment's grid (agents/replay/grid.py), so that the same branch reads the same in both.

- A **turn's** figures are those of its own events (the branch summary's query, store.events): its tool calls
  (the tool-call messages, by name), its tokens (the sum of its events' usage `total_token_count`; input:
  `prompt_token_count`, output: `candidates_token_count` + `thoughts_token_count`), and its duration, from its
  first event to its last, in seconds to the millisecond.
- A **continuation's** figures are the sums over its turns that ended: `turns` (how many), `tool_calls`,
  `total_tokens`, and `duration_seconds`, the sum of its turns' durations (the time the agent worked, not the
  time between a question and the next: a source's user may have answered an hour later).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

import msgspec


class TurnFigures(Protocol):
    """What a turn holds that a continuation adds up (compare's Turn, the grid's TurnFigures)."""

    @property
    def tool_calls(self) -> Mapping[str, int]: ...
    @property
    def total_tokens(self) -> int: ...
    @property
    def duration_seconds(self) -> float: ...


class Sums(msgspec.Struct, frozen=True, kw_only=True):
    """A continuation's figures: the sums over its turns that ended."""

    turns: int
    tool_calls: int
    total_tokens: int
    duration_seconds: float


def turn_duration(first_at: datetime | None, last_at: datetime | None) -> float:
    """A turn's duration: from its first event to its last (0 without events), to the millisecond."""
    if first_at is None or last_at is None:
        return 0.0
    return round((last_at - first_at).total_seconds(), 3)


def summed(turns: Sequence[TurnFigures]) -> Sums:
    """The figures of a continuation made of these turns (the ones that ended: the caller leaves out a turn
    still being played or never sent)."""
    return Sums(
        turns=len(turns),
        tool_calls=sum(sum(t.tool_calls.values()) for t in turns),
        total_tokens=sum(t.total_tokens for t in turns),
        duration_seconds=round(sum(t.duration_seconds for t in turns), 3),
    )


def tool_calls_by_name(turns: Iterable[TurnFigures]) -> dict[str, int]:
    """The turns' tool calls added up by tool name, names sorted."""
    out: dict[str, int] = {}
    for t in turns:
        for name, n in t.tool_calls.items():
            out[name] = out.get(name, 0) + n
    return dict(sorted(out.items()))
