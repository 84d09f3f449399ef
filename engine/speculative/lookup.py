"""The lookup drafter: drafts are continuations of the context's suffix in the request's sources.

Sources are token lists in priority order: the predicted output, the open file, the snippet,
documents, then the tokens generated so far (indexed as they arrive) and the prompt. Each source
keeps a **cursor**: the position in the source predicted to come next in the context.

* Cursor holds: the tokens committed since the last call are compared with the source at the
  cursor (O(new tokens), no search); if they all match, the cursor moves past them and the draft is
  the source from there.
* Miss: the cursor is dropped and the source **re-anchors** at its longest suffix match with the
  context (capped at `max_match` tokens), choosing among equally long matches the occurrence
  nearest the previous cursor: the first at or after it (an edit inserts, replaces or skips
  tokens, so copying resumes at or after the miss), else the nearest before it. Repeated code
  (similar functions, repeated imports) therefore keeps the cursor where it was, not at the first
  occurrence. Matches longer than `max_match` count as equal, so locality also decides between
  long identical stretches.
* The drafting source is the one with the longest run (capped at `max_match`); ties go to the
  higher priority.
* A source named `prediction` is the predicted output itself (e.g. the deterministic merge of an
  edit): it is aligned with the output, so its cursor starts at its first token, fully trusted,
  and the very first generated tokens are drafted from it before any suffix could match.

**Draft length.** A source's *run* is its match length at the anchor plus every committed token
that matched since. The draft is `ceil(growth * run)` tokens, at most `max_tokens`: a fresh 2-token
match drafts 4 (cheap if wrong), a run of 8 or more drafts the whole block (K = 16). Acceptance
feeds the run directly and a rejection resets it to the new match's length, so the length follows
recent acceptance like TCP slow start: 4 drafted and accepted plus the bonus make a run of 7, then
14 are drafted, then the full 15.

**Index.** Per source, two n-gram indexes, built when the source is first searched (a source whose
cursor never misses is never indexed): every `min_match`-gram and every `long_match`-gram -> the
sorted positions right after its occurrences. A source that never grows (the prediction, the file,
the snippet, documents, the prompt) gets a `SortedIndex` (its n-grams' hashes ordered by numpy's
radix sort on 16 bits of each, several times faster to build than a dict of lists, which at 8-32
concurrent requests was most of a verify step's host time); the generated tokens a
`GrowingIndex` (runs of SortedIndex and a dict of the newest positions), extended when searched.
Re-anchoring looks the context's last `long_match` tokens up first (any match of that length or
longer is there), else its last `min_match` tokens, then grows the candidate matches backwards one
token at a time, keeping those that still agree, up to `max_match`. Only the `max_candidates`
occurrences nearest the previous cursor are examined, so a re-anchor costs at most
O(max_candidates * max_match) whatever the source length. A call costs O(new tokens * sources)
to check cursors, O(draft length) to copy the draft, and one bounded re-anchor per lost source,
skipped once some source has a run of `max_match`; the generated tokens are indexed when that
source is next searched (each token once): in steady copying, amortized O(draft length). (A
suffix automaton finds the longest match in O(1) amortized but not the occurrence nearest a
cursor; sorted position lists give that with one bisect.)
"""

from __future__ import annotations

import math
import sys
import threading
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np

NgramIndex = dict[tuple[int, ...], list[int]]  # a growing source's (index_ngrams)
PREDICTION = "prediction"  # the source that is the predicted output, aligned with its first token


HASH_BASE = 0x9E3779B97F4A7C15  # odd 64-bit multiplier of the n-grams' polynomial hash
_MASK = (1 << 64) - 1


@lru_cache(maxsize=1024)  # a search looks one suffix up in every source: hashed once
def gram_hash(gram: tuple[int, ...], base: int = HASH_BASE) -> int:
    """The n-gram's 64-bit polynomial hash, as `SortedIndex` computes it for a whole source:
    Horner's rule modulo 2^64 (numpy's uint64 arithmetic wraps the same way).

    Example with base 10: (1, 2, 3) -> 123."""
    h = 0
    for t in gram:
        h = (h * base + t) & _MASK
    return h


_BUCKET_MIX = 0xD6E8FEB86659FD93  # odd: the top bits of hash * it depend on every bit of the hash


def _buckets(h: np.ndarray) -> np.ndarray:
    """A SortedIndex's bucket of each hash: the top 16 bits of hash * _BUCKET_MIX (mod 2^64)."""
    return ((h * np.uint64(_BUCKET_MIX)) >> np.uint64(48)).astype(np.uint16)


class SortedIndex:
    """The n-gram index of a source that never grows: its n-grams' hashes in buckets.

    `hashes` holds every n-gram's `gram_hash`, `ends[i]` the position right after the n-gram of
    `hashes[i]`, both numpy arrays, ordered by `buckets` (16 bits of the hash, `_buckets`) and within
    a bucket by position: one stable argsort of 16-bit keys, which numpy runs as a radix sort, 5-9x
    faster than sorting the 64-bit hashes (bench/HISTORY.md, "Issue 35: the L2 weight prefetch,
    built; index builds by buckets"). Built in a few numpy passes -- several times faster than a
    dict of lists (index_ngrams; bench/HISTORY.md, "Draft heads, round three") -- and kept as arrays,
    since a request's first miss builds every source's index while the GPU waits. `get(gram)` gives
    what `index_ngrams(tokens, n).get(gram)` gives, the sorted positions, plus, where two n-grams
    share a 64-bit hash, the other one's: `find_anchor` keeps only the candidates that really match.
    `tokens` may be a uint64 array already (one conversion for a source's indexes).

    Example: tokens [5, 6, 7, 5, 6], n = 2 -> get((5, 6)) = [2, 5], get((6, 7)) = [3], get((6, 5)) = None.
    """

    def __init__(self, tokens: Sequence[int] | np.ndarray, n: int, base: int = HASH_BASE):
        self._sort(ngram_hashes(np.asarray(tokens, dtype=np.uint64), (n,), base)[n], n, base)

    @classmethod
    def of_hashes(cls, hashes: np.ndarray, n: int, base: int = HASH_BASE) -> SortedIndex:
        """The index of the n-grams whose `ngram_hashes` are `hashes`."""
        index = cls.__new__(cls)
        index._sort(hashes, n, base)
        return index

    def _sort(self, h: np.ndarray, n: int, base: int) -> None:
        self.n, self.base = n, base
        buckets = _buckets(h)
        order = np.argsort(buckets, kind="stable")  # a radix sort; positions ascend within a bucket
        self.buckets, self.hashes, self.ends = buckets[order], h[order], order + n

    def get(self, gram: tuple[int, ...]) -> list[int] | None:
        return self.find(gram_hash(gram, self.base))

    def find(self, key: int) -> list[int] | None:
        """The positions after the n-grams whose hash is `key`, ascending."""
        bucket = np.uint16(((key * _BUCKET_MIX) & _MASK) >> 48)
        lo, hi = self.buckets.searchsorted(bucket), self.buckets.searchsorted(bucket, "right")
        if hi == lo:
            return None
        if hi - lo == 1:
            return [int(self.ends[lo])] if self.hashes[lo] == key else None
        return self.ends[lo:hi][self.hashes[lo:hi] == np.uint64(key)].tolist() or None


def ngram_hashes(toks: np.ndarray, lengths: tuple[int, ...], base: int = HASH_BASE) -> dict[int, np.ndarray]:
    """For each n of `lengths`, the `gram_hash` of every n-gram of the uint64 array `toks` (h[n][i]
    of toks[i : i + n]). By halves: the hash of a + b tokens is the first a's times base^b plus the
    last b's (Horner's rule, modulo 2^64), so 8-grams take three array passes, not eight, and the
    2-grams on the way are shared with the lengths that need them.

    Example with base 10: toks [1, 2, 3, 4], lengths (2, 3) -> {2: [12, 23, 34], 3: [123, 234]}."""
    memo = {1: toks}
    return {n: _hashes_of(memo, n, base) for n in lengths}


def _hashes_of(memo: dict[int, np.ndarray], n: int, base: int) -> np.ndarray:
    """`ngram_hashes`' n-grams, from the halves in `memo` (made first where missing). A module
    function: a closure that calls itself is a reference cycle, whose arrays wait for the
    garbage collector."""
    if n not in memo:
        a = n // 2
        count = max(0, len(memo[1]) - n + 1)
        first, last = _hashes_of(memo, a, base), _hashes_of(memo, n - a, base)
        memo[n] = first[:count] * np.uint64(pow(base, n - a, 1 << 64)) + last[a : a + count]
    return memo[n]


def sorted_indexes(tokens: Sequence[int], keys: tuple[int, ...]) -> list[SortedIndex]:
    """A `SortedIndex` of `tokens` for each n-gram length of `keys`, over one conversion to an
    array and one pass of hashing (`ngram_hashes`)."""
    hashes = ngram_hashes(np.asarray(tokens, dtype=np.uint64), keys)
    return [SortedIndex.of_hashes(hashes[n], n) for n in keys]


class IndexCache:
    """Read-only n-gram indexes of large sources, shared between requests (LRU).

    "Load a document once, ask many questions": the documents of RAG requests, and the file of
    repeated applies to it, come back request after request; an 8k-token document's two indexes
    cost ~1 ms to build. Sources shorter than `min_tokens` are indexed afresh (the cache would cost
    more than it saves). Entries are keyed by the n-gram lengths and the tokens themselves (hash,
    then equality on a hit), so a hit is always the right indexes. Only sources that never grow use it.
    """

    def __init__(self, max_entries: int = 16, min_tokens: int = 1024):
        self.max_entries, self.min_tokens = max_entries, min_tokens
        self._entries: OrderedDict[tuple, tuple[tuple[int, ...], list[SortedIndex]]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, tokens: list[int], keys: tuple[int, ...]) -> list[SortedIndex]:
        """`sorted_indexes(tokens, keys)`, built once for equal tokens and keys."""
        if len(tokens) < self.min_tokens:
            return sorted_indexes(tokens, keys)
        frozen = tuple(tokens)
        key = (keys, len(frozen), hash(frozen))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] == frozen:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry[1]
        indexes = sorted_indexes(tokens, keys)
        with self._lock:
            self.misses += 1
            self._entries[key] = (frozen, indexes)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return indexes


SHARED_INDEXES = IndexCache()


class GrowingIndex:
    """The n-gram index of a source that grows (the generated tokens), extended when searched.

    Runs of `SortedIndex` over consecutive spans of end positions, oldest first, then a dict
    (`index_ngrams`) for at most TAIL newest ones. An extension that would take the dict past TAIL
    becomes a run (with the dict's positions) in one numpy build, and a run absorbs the ones before
    it that are no longer than it, so L tokens make at most ~log2(L) runs and a position is sorted
    O(log L) times. A source searched step after step extends the dict by a step's tokens; one
    searched after a long copy (its cursor held) pays a numpy build, where the dict took ~2 µs a
    token (bench.host_path, "One miss"). `get` gives what `index_ngrams(tokens, n).get` gives, plus
    SortedIndex's hash collisions, which `find_anchor` drops.
    """

    TAIL = 256

    def __init__(self, n: int):
        self.n = n
        self.runs: list[tuple[SortedIndex, int, int]] = []  # (index, first end, last end)
        self.tail: NgramIndex = {}
        self.tail_first = n  # the first end position the dict holds
        self.next = n  # the next end position to index

    def extend(self, tokens: list[int]) -> None:
        """Index the n-grams ending at positions next .. len(tokens)."""
        last = len(tokens)
        if last < self.next:
            return
        if last - self.tail_first + 1 > self.TAIL:
            first = self.tail_first
            while self.runs and self.runs[-1][2] - self.runs[-1][1] <= last - first:
                first = self.runs.pop()[1]
            self.runs.append((SortedIndex(tokens[first - self.n : last], self.n), first, last))
            self.tail, self.tail_first = {}, last + 1
        else:
            index_ngrams(tokens, self.n, self.tail, self.next)
        self.next = last + 1

    def get(self, gram: tuple[int, ...]) -> list[int] | None:
        ends: list[int] = []
        key = gram_hash(gram)  # every run hashes with the default base
        for index, first, _ in self.runs:
            found = index.find(key)
            if found:
                ends.extend(p + first - self.n for p in found)
        ends.extend(self.tail.get(gram, ()))
        return ends or None


Index = NgramIndex | SortedIndex | GrowingIndex


def index_ngrams(tokens: list[int], n: int, index: NgramIndex | None = None, start: int = 0) -> NgramIndex:
    """Map each n-gram of `tokens` to the sorted positions right after its occurrences.

    Example: tokens [5, 6, 7, 5, 6], n = 2 -> {(5, 6): [2, 5], (6, 7): [3], (7, 5): [4]}; position 5
    is len(tokens): that occurrence has no continuation yet. Passing `index` and `start` adds only
    the positions >= start, for a list that has grown since it was indexed.
    """
    index = {} if index is None else index
    first = max(n, start)
    grams = zip(*(tokens[first - n + i :] for i in range(n)))  # the n-grams ending at first, first + 1, ...
    for p, gram in enumerate(grams, first):
        index.setdefault(gram, []).append(p)
    return index


def nearest(positions: list[int], ref: int) -> int:
    """The first of the sorted `positions` at or after `ref`, else the last one before it.

    Example: positions [3, 10, 17]: ref 11 -> 17, ref 10 -> 10, ref 20 -> 17, ref 0 -> 3.
    """
    i = bisect_left(positions, ref)
    return positions[i] if i < len(positions) else positions[-1]


def window(positions: list[int], ref: int, limit: int, size: int) -> list[int]:
    """At most `size` of the sorted `positions` below `limit`, centred where `ref` would go.

    Example: positions [1, 4, 6, 9, 12, 15], ref 10, limit 15, size 2 -> [9, 12].
    """
    end = bisect_left(positions, limit)
    i = bisect_left(positions, ref, 0, end)
    lo = max(0, i - size // 2)
    hi = min(end, lo + size)
    return positions[max(0, hi - size) : hi]


def grow_matches(context: list[int], source: list[int], ends: list[int], length: int, max_len: int) -> tuple[int, list[int]]:
    """Extend matches of the context's last `length` tokens backwards, up to `max_len` tokens.

    `ends` are positions p with source[p - length : p] == context[-length:]. Returns the longest
    length any of them reaches and the ends that reach it (still sorted).

    Example: context [4, 9, 1, 2], source [9, 1, 2, 0, 8, 1, 2, 3, 9, 1, 2, 5], ends of (1, 2) =
    [3, 7, 11], length 2. One token back the context has 9: source[0] = 9 keeps 3, source[4] = 8
    drops 7, source[8] = 9 keeps 11 -> length 3. Two back it has 4: source[-1] does not exist and
    source[7] = 3 -> nobody survives, so the answer is (3, [3, 11]).
    """
    while length < max_len and length < len(context):
        t = context[-length - 1]
        survivors = [p for p in ends if p > length and source[p - length - 1] == t]
        if not survivors:
            break
        ends, length = survivors, length + 1
    return length, ends


def follow(source: list[int], cursor: int, new: list[int]) -> int:
    """How many of the newly committed tokens `new` match the source at `cursor`.

    Example: source [1, 2, 3, 4], cursor 1, new [2, 3] -> 2 (the cursor moves to 3); new [2, 7] -> 1
    (a miss at position 2).
    """
    if source[cursor : cursor + len(new)] == new:
        return len(new)
    n = 0
    while cursor + n < len(source) and n < len(new) and source[cursor + n] == new[n]:
        n += 1
    return n


def find_anchor(context: list[int], source: list[int], indexes: list[tuple[int, Index]], ref: int,
                max_match: int, max_candidates: int) -> tuple[int, int] | None:
    """(position after the longest suffix match nearest `ref`, its length), or None below min_match.

    `indexes` are (n, n-gram index) pairs, longest n first. Example with one index of n = 2:
    context [.., 3, 1, 2], source [1, 2, 7, 3, 1, 2, 8, 3, 1, 2, 9], ref 7. (1, 2) ends at
    [2, 6, 10]; one token back the context has 3, which 6 and 10 share -> length 3, ends [6, 10];
    nothing longer, and the nearest to 7 at or after it is 10: the anchor is (10, 3) and the
    draft starts with 9.
    """
    for n, index in indexes:
        if len(context) < n:
            continue
        suffix = context[-n:]
        ends = index.get(tuple(suffix))
        if ends is None:
            continue
        ends = window(ends, ref, limit=len(source), size=max_candidates)
        if not isinstance(index, dict):  # hashed: drop another n-gram's occurrences of the same hash
            ends = [p for p in ends if source[p - n : p] == suffix]
        if not ends:
            continue
        length, ends = grow_matches(context, source, ends, n, max_match)
        return nearest(ends, ref), length
    return None


def draft_length(run: int, max_tokens: int, growth: float) -> int:
    """Tokens to draft after a run of `run` matching tokens: ceil(growth * run), at most max_tokens.

    Example with growth 2 and max_tokens 15: run 2 -> 4, run 3 -> 6, run 8 -> 15.
    """
    return max(0, min(max_tokens, math.ceil(growth * run)))


class _Source:
    """One source's tokens, n-gram indexes and cursor. A source that `grows` (the generated
    tokens) keeps `GrowingIndex`es, extended over its new tokens when next searched (a cursor that
    holds never searches: steady copying pays no indexing); the others `SortedIndex`es, from
    `cache` if given."""

    def __init__(self, name: str, tokens: list[int], keys: tuple[int, ...], ref: int = 0,
                 cache: IndexCache | None = None, grows: bool = False):
        assert not (grows and cache), "a shared (cached) index is read-only: a source that grows has its own"
        self.name = name
        self.tokens = tokens
        self.keys = keys
        self.grows = grows
        self._cache = cache
        self._indexes: list[tuple[int, Index]] | None = None
        self._indexed = 0  # the tokens the indexes cover (a growing source's may lag until searched)
        self.cursor: int | None = None  # next expected position; None = lost, re-anchor
        self.run = 0
        self.ref = ref  # where the last cursor was, for choosing the nearest occurrence

    @property
    def indexes(self) -> list[tuple[int, Index]]:
        """(n, n-gram index) pairs, longest n first, built when first searched: a source whose
        cursor never misses (a right prediction; the prompt while another source copies) is
        never indexed, and a request's first step does not pay every source's index at once."""
        if self._indexes is None:
            if self.grows:
                self._indexes = [(n, GrowingIndex(n)) for n in self.keys]
            else:
                build = self._cache.get if self._cache else sorted_indexes
                indexes = build(self.tokens, self.keys)
                self._indexes = list(zip(self.keys, indexes))
        if self.grows and self._indexed < len(self.tokens):  # the positions after the last one indexed
            for _, index in self._indexes:
                index.extend(self.tokens)
        self._indexed = len(self.tokens)
        return self._indexes

    def extend(self, new: list[int]) -> None:
        assert self.grows, f"source {self.name!r} does not grow: its index is a SortedIndex"
        self.tokens.extend(new)  # indexed when next searched (`indexes`)


class LookupDrafter:
    """Drafts from named sources in priority order, plus the generated tokens and the prompt.

    `stats` counts calls, and per source name re-anchoring searches, cursor misses and drafts
    (for tests and benchmarks). `last_source` names the source of the last draft.
    """

    def __init__(self, sources: Mapping[str, list[int]], prompt_len: int, *, min_match: int = 2,
                 long_match: int = 8, max_match: int = 16, max_candidates: int = 64,
                 growth: float = 2.0, prompt_as_source: bool = True):
        if not (1 <= min_match <= max_match and max_candidates >= 1 and growth > 0):
            raise ValueError(f"bad lookup settings: min_match={min_match}, max_match={max_match}, "
                             f"max_candidates={max_candidates}, growth={growth}")
        reserved = {"generated", "prompt"} & set(sources)
        if reserved:
            raise ValueError(f"source names {sorted(reserved)} are reserved for the drafter's own sources")
        self.prompt_len = prompt_len
        self.max_match = max_match
        self.max_candidates = max_candidates
        self.growth = growth
        self.prompt_as_source = prompt_as_source
        long_match = min(max(long_match, min_match), max_match)
        self.keys = (long_match, min_match) if long_match > min_match else (min_match,)
        # Documents and files come back request after request: their indexes are shared. The
        # prediction and the prompt are new each time (caching them would only evict the others).
        self._sources = [_Source(name, list(toks), self.keys, cache=None if name == PREDICTION else SHARED_INDEXES)
                         for name, toks in sources.items()]
        for src in self._sources:
            if src.name == PREDICTION and src.tokens:
                src.cursor, src.run = 0, max_match
        # The most recent repetition of generated text is the likeliest to repeat again.
        self._generated = _Source("generated", [], self.keys, ref=sys.maxsize, grows=True)
        self._sources.append(self._generated)
        self._seen = 0  # context tokens processed so far
        self._best: _Source | None = None  # the source of the last draft
        self.last_source: str | None = None
        self.stats = {"calls": 0, "searches": {}, "misses": {}, "drafts": {}}  # per source name

    def propose(self, context: list[int], max_tokens: int) -> list[int]:
        self.stats["calls"] += 1
        if len(context) < self._seen:
            raise ValueError(f"context shrank from {self._seen} to {len(context)} tokens; drafters expect it to grow")
        if self._seen == 0 and self.prompt_as_source and self.prompt_len > 0:
            self._sources.append(_Source("prompt", list(context[: self.prompt_len]), self.keys))
        # Cursors follow output tokens only; the prompt is never part of a source's continuation.
        new = context[max(self._seen, self.prompt_len) :]
        if new:
            self._generated.extend(new)
        self._seen = len(context)
        for src in self._sources:
            if src.cursor is not None and new:
                self._follow(src, new)
        best = self._best = self._pick(context)
        self.last_source = best.name if best else None
        if best is None or max_tokens <= 0:
            return []
        n = draft_length(best.run, max_tokens, self.growth)
        draft = best.tokens[best.cursor : best.cursor + n]
        if best is self._generated and len(draft) < n:
            # The output repeats with period len(draft): the copy overlaps itself (as in LZ77).
            draft = [draft[i % len(draft)] for i in range(n)]
        self.stats["drafts"][best.name] = self.stats["drafts"].get(best.name, 0) + 1
        return draft

    def peek(self, context: list[int], max_tokens: int) -> list[int]:
        """A draft continuing `context` -- the committed tokens plus tokens not verified yet (the
        draft model's, engine/speculative/hybrid.py) -- that moves no cursor: the longest suffix match
        over the sources (each the occurrence nearest its cursor; ties to the higher priority),
        then `ceil(growth * match)` tokens of it. Call after `propose` for the committed part.

        Example: a source [.., 7, 8, 9, 10, 11, 12, ..] and a context ending [.., 7, 8] (the model
        drafted 7, 8): a 2-token match, so [9, 10, 11, 12] (4 tokens) follow it.
        """
        best, best_len = None, 0
        for src in self._sources:
            ref = src.cursor if src.cursor is not None else src.ref
            hit = find_anchor(context, src.tokens, src.indexes, ref, self.max_match, self.max_candidates)
            if hit is not None and hit[1] > best_len:
                best, best_len = (src, hit[0]), hit[1]
        if best is None or max_tokens <= 0:
            return []
        src, pos = best
        return src.tokens[pos : pos + draft_length(best_len, max_tokens, self.growth)]

    def lookahead(self, context: list[int], draft: list[int], max_tokens: int) -> list[int]:
        """The bet behind planning a step ahead (engine/scheduler.py, `Scheduler.plan_ahead`): the
        token this drafter predicts after `draft` -- the bonus token, were all of `draft` accepted
        -- then the draft it would propose next, up to `max_tokens` long (its length as if the
        run had grown by all of them). `[]` where there is no bet: `draft` is not this drafter's
        proposal for `context` (brought up to date first, as `propose` does), or its source ends.

        Example: a source [.., 5, 6, 7, 8, 9, 10, ..] with its cursor at 5 and a run of 16: draft
        [5, 6] -> [7, 8, 9, 10, ..] (7 the predicted bonus, then up to max_tokens tokens).
        """
        if len(context) != self._seen:
            self.propose(context, len(draft))
        src = self._best
        if src is None or src.cursor is None:
            return []
        start = src.cursor + len(draft)
        if src.tokens[src.cursor : start] != draft:
            return []
        return src.tokens[start : start + 1 + draft_length(src.run + len(draft) + 1, max_tokens, self.growth)]

    def index_generated(self) -> None:
        """Index the generated tokens up to now; otherwise the next search does it first (after
        a long copy, a numpy build: bench.host_path, "One miss")."""
        self._generated.indexes

    def _follow(self, src: _Source, new: list[int]) -> None:
        matched = follow(src.tokens, src.cursor, new)
        if matched == len(new):
            src.cursor += matched
            src.run += matched
        else:
            self.stats["misses"][src.name] = self.stats["misses"].get(src.name, 0) + 1
            src.ref, src.cursor, src.run = src.cursor + matched, None, 0

    def _pick(self, context: list[int]) -> _Source | None:
        """The source with the longest run (capped at max_match), ties to the higher priority."""
        best, best_run = None, 0
        for src in self._sources:
            if best_run >= self.max_match:
                break  # nothing later can beat it; lost cursors re-anchor when they could matter
            if src.cursor is not None and src.cursor >= len(src.tokens):
                src.ref, src.cursor, src.run = src.cursor, None, 0  # copied to the end: look again
            if src.cursor is None:
                self.stats["searches"][src.name] = self.stats["searches"].get(src.name, 0) + 1
                hit = find_anchor(context, src.tokens, src.indexes, src.ref, self.max_match, self.max_candidates)
                if hit is not None:
                    src.cursor, src.run = hit
            if src.cursor is None:
                continue
            run = min(src.run, self.max_match)
            if run > best_run:
                best, best_run = src, run
        return best
