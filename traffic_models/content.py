"""What synthetic messages say: query words and header TTL/hops.

Theory of operation
-------------------
A router's cost per message barely depends on its content, but a few things do: the
query string's length sets the payload size, repeated query strings are what a query
cache or a duplicate filter would catch, and TTL and hops decide how far a message is
forwarded. So the content models aim at those aggregates, not at meaning.

Query words follow Zipf's law: the word of rank ``r`` is drawn with probability
proportional to ``1 / r**s``. Search terms on file-sharing networks have long been
observed to be Zipf-like (a few very popular terms, a long tail), and the skew matters
for anything keyed by query text. The words themselves are made up, built from
syllables by a seeded random source, so they are pronounceable, reproducible and carry
no real-world content; shorter words get the high ranks, as in natural language.

Sampling precomputes the cumulative weight table once and bisects it per draw:
``O(log n)`` per word with no per-draw allocation, which keeps query generation cheap at
tens of thousands of messages per second.

TTL and hops: a servent originates messages with hops 0 and a TTL of 7 by default (the
Gnutella 0.6 draft's recommendation, still what servents send), so that is the default
:class:`HopsTtl`. Other distributions model traffic that appears relayed, e.g. a
replay of what a router receives from the middle of the network. Draws are clamped to
what a router accepts: TTL at least 1 and TTL + hops at most 15, the hard limit mature
servents enforce.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import random
from collections.abc import Mapping
from types import MappingProxyType

from protocol.constants import HARD_TTL_LIMIT

__all__ = ["HopsTtl", "Vocabulary"]

_ONSETS = (
    "b", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
    "br", "ch", "dr", "fl", "gr", "kl", "pr", "sh", "st", "tr",
)  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou", "ea")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "k", "nd", "st")


def _made_up_words(count: int, seed: int) -> list[str]:
    """``count`` distinct pronounceable words, shortest first."""
    rng = random.Random(f"vocabulary:{seed}")
    seen: set[str] = set()
    words: list[str] = []
    while len(words) < count:
        # Mostly two syllables; one- and three-syllable words widen the space and the
        # range of lengths.
        syllables = rng.choices((1, 2, 3), weights=(2, 5, 3))[0]
        word = "".join(
            rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    words.sort(key=len)  # stable: ties keep their random order
    return words


class Vocabulary:
    """Zipf-distributed made-up words for query strings.

    Ranks are 1-based, as in Zipf's law: :meth:`word` (1) is the most frequent word.
    """

    __slots__ = ("_cumulative", "_encoded", "_total", "_words", "exponent", "seed", "size")

    def __init__(self, size: int = 5000, exponent: float = 1.0, seed: int = 0) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"vocabulary size must be a whole number >= 1, got {size!r}")
        exponent = float(exponent)
        if not math.isfinite(exponent) or exponent < 0:
            raise ValueError(f"Zipf exponent must be a finite number >= 0, got {exponent!r}")
        self.size = size
        self.exponent = exponent
        self.seed = seed
        self._words = tuple(_made_up_words(size, seed))
        self._encoded = tuple(word.encode("ascii") for word in self._words)
        self._cumulative: tuple[float, ...] = tuple(
            itertools.accumulate(math.pow(rank, -exponent) for rank in range(1, size + 1))
        )
        self._total: float = self._cumulative[-1]

    def __len__(self) -> int:
        return self.size

    def word(self, rank: int) -> str:
        """The word of ``rank`` (1 = most frequent, ``size`` = least).

        Raises:
            IndexError: rank outside ``1..size``.
        """
        if not 1 <= rank <= self.size:
            raise IndexError(f"rank {rank} is outside 1..{self.size}")
        return self._words[rank - 1]

    def probability(self, rank: int) -> float:
        """The Zipf probability of drawing the word of ``rank``."""
        if not 1 <= rank <= self.size:
            raise IndexError(f"rank {rank} is outside 1..{self.size}")
        return math.pow(rank, -self.exponent) / self._total

    def draw_rank(self, rng: random.Random) -> int:
        """One rank, Zipf-distributed."""
        index = bisect.bisect_right(self._cumulative, rng.random() * self._total)
        return min(index, self.size - 1) + 1

    def query_text(self, rng: random.Random, min_words: int = 1, max_words: int = 4) -> bytes:
        """A search string of ``min_words``..``max_words`` Zipf-drawn words (uniform
        count), space-separated ASCII, never containing NUL."""
        if not 1 <= min_words <= max_words:
            raise ValueError(f"need 1 <= min_words <= max_words, got {min_words}, {max_words}")
        count = rng.randint(min_words, max_words) if min_words != max_words else min_words
        cumulative, total, encoded = self._cumulative, self._total, self._encoded
        last = self.size - 1
        random_ = rng.random
        picks = [
            encoded[min(bisect.bisect_right(cumulative, random_() * total), last)]
            for _ in range(count)
        ]
        return b" ".join(picks)

    def __repr__(self) -> str:
        return f"Vocabulary(size={self.size}, exponent={self.exponent:g}, seed={self.seed})"


def _distribution(name: str, weights: Mapping[int, float]) -> Mapping[int, float]:
    if not weights:
        raise ValueError(f"{name} distribution is empty")
    checked: dict[int, float] = {}
    for value, weight in weights.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
            raise ValueError(f"{name} value {value!r} must be a whole number in 0..255")
        weight = float(weight)
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"{name} weight for {value} must be finite and >= 0, got {weight}")
        checked[value] = weight
    if math.fsum(checked.values()) <= 0:
        raise ValueError(f"{name} distribution has only zero weights")
    return MappingProxyType(checked)


def _sampler(weights: Mapping[int, float]) -> tuple[tuple[int, ...], tuple[float, ...]]:
    values = tuple(value for value, weight in weights.items() if weight > 0)
    cumulative = tuple(itertools.accumulate(weights[value] for value in values))
    return values, cumulative


def _draw(values: tuple[int, ...], cumulative: tuple[float, ...], rng: random.Random) -> int:
    if len(values) == 1:
        return values[0]  # the common case costs no random draw at all
    index = bisect.bisect_right(cumulative, rng.random() * cumulative[-1])
    return values[min(index, len(values) - 1)]


def _default_ttl() -> Mapping[int, float]:
    return {7: 1.0}


def _default_hops() -> Mapping[int, float]:
    return {0: 1.0}


@dataclasses.dataclass(frozen=True, slots=True)
class HopsTtl:
    """Weighted TTL and hops values for injected messages (drawn independently).

    The default, TTL 7 and hops 0, is what an originating servent sends.
    """

    ttl: Mapping[int, float] = dataclasses.field(default_factory=_default_ttl)
    hops: Mapping[int, float] = dataclasses.field(default_factory=_default_hops)
    _ttl_table: tuple[tuple[int, ...], tuple[float, ...]] = dataclasses.field(
        init=False, repr=False, compare=False
    )
    _hops_table: tuple[tuple[int, ...], tuple[float, ...]] = dataclasses.field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        ttl = _distribution("TTL", self.ttl)
        hops = _distribution("hops", self.hops)
        object.__setattr__(self, "ttl", ttl)
        object.__setattr__(self, "hops", hops)
        object.__setattr__(self, "_ttl_table", _sampler(ttl))
        object.__setattr__(self, "_hops_table", _sampler(hops))

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.ttl.items())), tuple(sorted(self.hops.items()))))

    def draw(self, rng: random.Random) -> tuple[int, int]:
        """``(ttl, hops)``, clamped so that ``ttl >= 1`` and ``ttl + hops <= 15``.

        Hops win over TTL when the two do not fit: a message that has travelled far has
        little TTL left, and hops of 15 or more become 14 so that TTL 1 still fits.
        """
        ttl = _draw(*self._ttl_table, rng)
        hops = _draw(*self._hops_table, rng)
        if hops >= HARD_TTL_LIMIT:
            hops = HARD_TTL_LIMIT - 1
        if ttl + hops > HARD_TTL_LIMIT:
            ttl = HARD_TTL_LIMIT - hops
        return max(ttl, 1), hops
