"""What an apply returns, typed end to end: `ApplyResult` and the figures inside it.

`ApplyResult.as_dict()` is the wire form: the `POST /v1/apply` response, the language server's
apply result (plus the document's uri and version), `editapply apply --json`. `from_dict` reads it
back (the HTTP clients). `ApplyResponse` (engine/server/schemas.py) declares the same shape for
OpenAPI; tests check both front ends' answers against it. Code reads the figures by attribute
(`result.stats.path`, `result.usage.completion_tokens`), never by string key.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from engine.apply.errors import Problem
from engine.apply.hunks import Hunk, described
from engine.apply.validate import Validation
from engine.types import GenerationStats


@dataclass(frozen=True)
class Usage:
    """Token counts, as OpenAI's `usage` names them (prediction tokens: the drafts the engine
    verified, accepted or not)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0

    @classmethod
    def of(cls, stats: GenerationStats) -> "Usage":
        return cls(stats.prompt_tokens, stats.generated_tokens, stats.accepted, stats.drafted - stats.accepted)


@dataclass(frozen=True)
class RankingStats:
    """How the model ranked an ambiguous snippet's readings (ranking.py): the best reading's lead
    over the next in nats (`margin`) against the `threshold` it needed."""

    readings: int
    margin: float
    threshold: float
    prompt_tokens: int
    scored_tokens: int
    seconds: float
    window: tuple[int, int]


@dataclass(frozen=True)
class ApplyStats:
    """Which path served the request and why, the merge's verdict, and the engine's figures
    (zero on the deterministic path). `seconds`: the merge for the deterministic path, submission
    to the last token for the model path. `max_tokens` (the model path) and `ranking` (the
    readings were ranked) are left out of the wire form when unset."""

    path: str  # deterministic | ranked | model
    reason: str
    mode: str
    language: str
    kind: str  # snippet | diff | search_replace | instruction
    merge_status: str
    merge_confidence: float | None
    prompt_form: str | None = None
    finish_reason: str | None = None
    steps: int = 0
    accepted_per_step: float = 0.0
    accepted_per_step_hist: dict[int, int] = field(default_factory=dict)  # committed tokens in one step -> steps
    tokens_per_second: float = 0.0
    ttft_ms: float | None = None
    drafted: int = 0
    accepted: int = 0
    seconds: float = 0.0
    max_tokens: int | None = None
    ranking: RankingStats | None = None

    def as_dict(self) -> dict:
        out = asdict(self)
        for optional in ("max_tokens", "ranking"):
            if out[optional] is None:
                del out[optional]
        if self.ranking is not None:
            out["ranking"]["window"] = list(self.ranking.window)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "ApplyStats":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        # JSON keys are strings: the histogram's are token counts again
        values["accepted_per_step_hist"] = {int(k): n for k, n in values.get("accepted_per_step_hist", {}).items()}
        if values.get("ranking") is not None:
            r = values["ranking"]
            values["ranking"] = RankingStats(**{**r, "window": tuple(r["window"])})
        return cls(**values)


@dataclass(frozen=True)
class ReadingChoice:
    """One reading of an ambiguous snippet (or the merge a refused model file leaves for review:
    `ApplyResult.candidate`), as a result offers it: what it means, the file it gives, its diff,
    and the model's log-probability of it when ranked."""

    label: str
    merged_code: str
    diff: str
    logprob: float | None = None

    def as_dict(self) -> dict:
        return {"label": self.label, "merged_code": self.merged_code, "diff": self.diff, "logprob": self.logprob}


@dataclass
class ApplyResult:
    """What every front end returns. `readings` lists the snippet's readings when it is
    ambiguous: the one taken first when the model chose (`stats.path` "ranked"), or the choices
    of a refusal. `hunks`: the changes from the file to `merged_code` one by one (hunks.py),
    which editors accept or reject one at a time. `candidate`: where the model's file failed
    validation but the deterministic merge validated, that merge, offered for review: the model
    did not confirm it, so no front end applies it without the user's look."""

    merged_code: str
    diff: str
    validation: Validation
    usage: Usage
    stats: ApplyStats
    readings: tuple[ReadingChoice, ...] = ()
    hunks: tuple[Hunk, ...] = ()
    candidate: ReadingChoice | None = None

    @property
    def ok(self) -> bool:
        return self.validation.ok

    @property
    def path(self) -> str:
        return self.stats.path

    def engine_stats(self) -> GenerationStats:
        """The result's figures as engine stats (what metrics and OpenAI `usage` read); those the
        result does not carry are left at their defaults."""
        u, s = self.usage, self.stats
        return GenerationStats(prompt_tokens=u.prompt_tokens, generated_tokens=u.completion_tokens, drafted=s.drafted,
                               accepted=s.accepted, ttft_ms=s.ttft_ms,
                               accepted_per_step_hist=dict(s.accepted_per_step_hist))

    def as_dict(self) -> dict:
        return {
            "merged_code": self.merged_code,
            "diff": self.diff,
            "validation": {"ok": self.validation.ok,
                           "problems": [{"name": p.name, "reason": p.reason, "severity": p.severity, "line": p.line}
                                        for p in self.validation.problems]},
            "usage": asdict(self.usage),
            "stats": self.stats.as_dict(),
            "readings": [r.as_dict() for r in self.readings],
            "hunks": described(self.diff, list(self.hunks)),
            "candidate": None if self.candidate is None else self.candidate.as_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ApplyResult":
        v = d["validation"]
        problems = tuple(Problem(p["name"], p["reason"], p.get("severity", "error"), p.get("line")) for p in v["problems"])

        def choice(r: dict) -> ReadingChoice:
            return ReadingChoice(r["label"], r["merged_code"], r["diff"], r.get("logprob"))
        readings = tuple(choice(r) for r in d.get("readings") or ())
        found = tuple(Hunk(h["start"], h["end"], h["newStart"], h["newEnd"]) for h in d.get("hunks") or ())
        usage = Usage(**{f.name: d["usage"].get(f.name, 0) for f in fields(Usage)})
        candidate = choice(d["candidate"]) if d.get("candidate") else None
        return cls(d["merged_code"], d["diff"], Validation(bool(v["ok"]), problems), usage,
                   ApplyStats.from_dict(d["stats"]), readings, found, candidate)


@dataclass(frozen=True)
class Progress:
    """One stream increment while the model writes: the new answer text and running figures."""

    text: str
    tokens: int
    steps: int
    tokens_per_second: float
    accepted_per_step: float
    stats: GenerationStats
