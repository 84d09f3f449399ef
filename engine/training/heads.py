"""Training the target's draft heads (engine/speculative/heads.py) on its own predictions.

Medusa-1's recipe, self-distilled: the target is frozen; a corpus is cut into chunks of
`seq_len` tokens; for each batch the target runs once (its eager prefill forward, no gradient) and
gives the final hidden state h_t and its own greedy token g_t after every position t. Head k learns
to guess g_{t+k} from h_t: what the target itself would write k + 1 tokens on (its greedy token
g_t is the step's bonus token; g_{t+1} is what head 1 drafts after it), with cross-entropy through
the target's frozen lm_head, heads weighted LOSS_DECAY^(k-1). Labels are the target's choices, not
the corpus's tokens, since verification accepts exactly what the target would write.

**Answers** (`answers` > 0): a corpus teaches the heads the target's guesses over code and docs
as written, but the heads draft the target's own answers: chat and RAG prose, explanations, code
written to a request. So the target first writes answers to `answers` requests made from the
corpus (`answer_requests`: questions about a definition of a file given as the document, as
engine/rag.py asks them; requests to explain a definition's code or to write a function from its
docstring's summary), greedy, in one continuous batch; each batch of training then takes
`answer_share` of its chunks from those conversations (prompt and answer, end to end) and the
rest from the corpus. Medusa's self-distillation, with prompts from the corpus instead of a chat
dataset.

A held-out slice of the chunks (`holdout`) is scored before and after: each head's top-1
agreement with its label, and the mean number of leading heads that all agree (the heads' tokens
accepted per step were the target to write the held-out text itself). bench/HISTORY.md has the
runs and their speed ("Draft heads", rounds two to four).

    editapply train-heads --model MODEL --corpus DIR_OR_FILE... [--heads 3] [--steps 600] [--answers 0]
"""

from __future__ import annotations

import math
import random
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.speculative.heads import DraftHeads

LOSS_DECAY = 0.8  # weight of head k's loss: LOSS_DECAY ** (k - 1) (Medusa's)
TEXT_SUFFIXES = (".py", ".pyi", ".js", ".ts", ".tsx", ".go", ".rs", ".java", ".c", ".h", ".cc", ".cpp", ".hpp",
                 ".rb", ".cs", ".sh", ".lua", ".md", ".rst", ".txt")
MAX_FILE_BYTES = 200_000  # larger files are mostly generated or data
# Requests made from the corpus for the target to answer (answer_requests). No benchmark prompt
# is among them (bench/drafters.py asks its own questions about its own document).
QUESTIONS = (
    "What does `{name}` do? Explain it briefly.",
    "Summarize how `{name}` works, what it takes and what it returns.",
    "When would I call `{name}`, and what should I watch out for?",
    "Walk me through `{name}` step by step.",
)
EXPLAIN = "Explain what this code does:\n\n```\n{code}\n```"
WRITE = "Write a Python function `{name}` that does this: {summary}"
SUMMARIZE = "Summarize this document in a few sentences."
ANSWER_BATCH = 64  # requests answered at once
DOCUMENT_CHARS = 3000  # a question's document: the file's first characters around the definition
CODE_LINES = 30  # an explained definition: at most this many lines from its first
DEFINITION = re.compile(r"[ \t]*(?:async[ \t]+)?(?:def|class|function)[ \t]+([A-Za-z_]\w*)")  # one line


@dataclass
class HeadScores:
    """Agreement of each head with the target on held-out text (see the module docstring)."""

    top1: list[float]  # per head: share of positions where it guessed the target's token
    chain: float  # mean leading heads that all guessed right: drafted tokens accepted per step


@dataclass
class TrainReport:
    model: str
    heads: int
    steps: int
    tokens: int  # tokens the heads trained on
    seconds: float
    corpus_files: int
    corpus_tokens: int
    before: HeadScores
    after: HeadScores
    losses: list[float] = field(default_factory=list)  # mean loss per tenth of the run
    answers: int = 0  # requests the target answered for training (module docstring)
    answer_tokens: int = 0  # tokens of those conversations
    answers_before: HeadScores | None = None  # scores on held-out conversations
    answers_after: HeadScores | None = None

    def info(self) -> dict:
        return asdict(self)


def read_corpus(paths: list[str | Path], max_bytes: int = 64 << 20) -> list[str]:
    """The text files under `paths` (files, or folders walked in sorted order) with a source or
    prose suffix (TEXT_SUFFIXES), each at most MAX_FILE_BYTES, up to `max_bytes` in all."""
    texts, total = [], 0
    for root in map(Path, paths):
        if not root.exists():
            raise ValueError(f"corpus path {root} does not exist")
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            if f.suffix not in TEXT_SUFFIXES or f.stat().st_size > MAX_FILE_BYTES:
                continue
            try:
                text = f.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            if text.strip():
                texts.append(text)
                total += len(text)
                if total >= max_bytes:
                    return texts
    return texts


def chunk_tokens(tokenizer, texts: list[str], seq_len: int) -> torch.Tensor:
    """The texts tokenized and joined end to end (a blank line between), cut into [chunks, seq_len]."""
    sep = tokenizer.encode("\n\n")
    try:
        return chunk_ids([tokenizer.encode(text) + sep for text in texts], seq_len)
    except ValueError as exc:
        raise ValueError(f"the corpus has {exc}") from None


def _docstring_summary(lines: list[str], i: int) -> str | None:
    """The first line of the docstring of the Python `def` at lines[i] (its signature may take a
    few lines), if it has one of at least 16 characters."""
    if not lines[i].lstrip().startswith(("def ", "async def ")):
        return None
    for line in lines[i + 1 : i + 6]:
        text = line.strip()
        if text.startswith(('"""', 'r"""')):
            summary = text.lstrip('r"').rstrip('"').strip()
            return summary if len(summary) >= 16 else None
        if text and not text.endswith((",", "(", ":")) and not text.startswith(")"):
            return None  # the body began without a docstring
    return None


def answer_requests(tokenizer, texts: list[str], n: int, max_tokens: int, seed: int = 0) -> list:
    """`n` requests (engine.types.Request, greedy) made from the corpus for the target to answer,
    spread over its texts: a question (QUESTIONS) about a definition of a file given as the
    document (engine/rag.py's prompt; prose files are summarized), a request to explain a
    definition's code (EXPLAIN), or to write a function from its docstring's summary (WRITE)."""
    from engine.rag import rag_request
    from engine.types import Request, SamplingParams

    rng = random.Random(seed)
    params = SamplingParams(max_tokens=max_tokens)
    order = list(range(len(texts)))
    rng.shuffle(order)
    out = []
    for k in range(n):
        text = texts[order[k % len(order)]]
        lines = text.splitlines()
        defs = [(m.group(1), i) for i, line in enumerate(lines) if (m := DEFINITION.match(line))]
        kind = rng.randrange(3) if defs else 0
        if kind == 0:  # a question about the file's definition (or a summary of the file) as a document
            if defs:
                name, line = rng.choice(defs)
                start = max(0, sum(len(t) + 1 for t in lines[:line]) - DOCUMENT_CHARS // 3)
                question = rng.choice(QUESTIONS).format(name=name)
            else:
                start, question = 0, SUMMARIZE
            out.append(rag_request(tokenizer, [text[start : start + DOCUMENT_CHARS]], question, params))
            continue
        name, line = rng.choice(defs)
        summary = _docstring_summary(lines, line)
        if kind == 2 and summary:
            content = WRITE.format(name=name, summary=summary)
        else:
            content = EXPLAIN.format(code="\n".join(lines[line : line + CODE_LINES]))
        out.append(Request(tokenizer.encode_chat([{"role": "user", "content": content}]), params))
    return out


def generate_answers(engine, requests: list) -> list[list[int]]:
    """Each request's prompt and the target's answer, from one continuous batch."""
    seqs = [engine.add_request(r) for r in requests]
    while engine.has_work():
        engine.step()
    return [list(seq.tokens) for seq in seqs]


def chunk_ids(ids: list[list[int]], seq_len: int) -> torch.Tensor:
    """Token lists joined end to end and cut into [chunks, seq_len] (the tail is dropped)."""
    flat = [t for part in ids for t in part]
    n = len(flat) // seq_len
    if n == 0:
        raise ValueError(f"{len(flat)} tokens, fewer than one chunk of {seq_len}")
    return torch.tensor(flat[: n * seq_len], dtype=torch.long).view(n, seq_len)


def _head_weight(model) -> torch.Tensor:
    head = model.embed_tokens if model.lm_head is None else model.lm_head
    if not hasattr(head, "weight"):
        raise ValueError("draft heads train on an unquantized lm_head (int8_head off)")
    return head.weight


@torch.no_grad()
def target_states(runner, chunks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states [B, L, H] and the target's greedy tokens [B, L] of a batch of chunks."""
    B, L = chunks.shape
    hidden = runner.prefill_hidden(chunks.tolist()).clone().view(B, L, -1)  # a normal tensor: autograd reads it
    greedy = runner.model.greedy_from_logits(runner.model._logits(hidden.reshape(B * L, -1))).view(B, L)
    return hidden, greedy


def _head_logits(heads: DraftHeads, k: int, hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Head k's (0-based) logits for hidden rows [N, H], through the frozen lm_head weight."""
    return heads.head_state(k, hidden.float()).to(weight.dtype) @ weight.t()


@torch.no_grad()
def held_states(runner, chunks: torch.Tensor, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The target's states of held-out chunks, batch by batch: computed once, scored before and
    after training (the target is frozen)."""
    return [target_states(runner, chunks[i : i + batch]) for i in range(0, len(chunks), batch)]


@torch.no_grad()
def score(runner, heads: DraftHeads, states: list[tuple[torch.Tensor, torch.Tensor]]) -> HeadScores:
    weight = _head_weight(runner.model)
    n = heads.num_heads
    right = torch.zeros(n)
    chain, count = 0.0, 0
    for hidden, greedy in states:
        rows = hidden.shape[1] - n  # positions where every head has a label
        ok = torch.stack([(_head_logits(heads, k, hidden[:, :rows].reshape(-1, hidden.shape[-1]), weight).argmax(-1)
                           == greedy[:, k + 1 : k + 1 + rows].reshape(-1)).cpu() for k in range(n)])  # [n, N]
        right += ok.float().sum(1)
        chain += ok.int().cumprod(0).sum().item()
        count += ok.shape[1]
    return HeadScores(top1=[round(r / count, 4) for r in right.tolist()], chain=round(chain / count, 4))


class _Pool:
    """Chunks [N, L] split into training and held-out ones (the last `holdout`, at most a fifth);
    `take(step, rows)` cycles through the training chunks in a fixed shuffled order."""

    def __init__(self, chunks: torch.Tensor, holdout: int):
        holdout = min(holdout, len(chunks) // 5)
        self.train, self.held = chunks[: len(chunks) - holdout], chunks[len(chunks) - holdout :]
        if len(self.train) == 0:
            raise ValueError("too few chunks to train on")
        self.order = torch.randperm(len(self.train), generator=torch.Generator().manual_seed(0))

    def take(self, step: int, rows: int) -> torch.Tensor:
        return self.train[self.order[torch.arange(step * rows, (step + 1) * rows) % len(self.train)]]


def train_heads(runner, chunks: torch.Tensor, num_heads: int = 3, steps: int = 600, batch: int = 16,
                lr: float = 1e-3, holdout: int = 64, log=print, name: str = "", max_seconds: float = 0.0,
                answers: torch.Tensor | None = None, answer_share: float = 0.5) -> tuple[DraftHeads, TrainReport]:
    """Train `num_heads` heads for `runner`'s model on `chunks` [N, L] (module docstring): `steps`
    batches of `batch` chunks, cycling through the chunks in a fixed shuffled order; the last
    `holdout` chunks (at most a fifth) are held out and scored before and after. With `answers`
    (chunks of the target's own conversations, of the same length), `answer_share` of each batch
    comes from them, held out and scored alike. With `max_seconds`, the run is shortened to fit
    it (timed over its first steps; the learning-rate schedule follows the shortened run)."""
    model = runner.model
    weight = _head_weight(model)
    corpus = _Pool(chunks, holdout)
    talk = _Pool(answers, holdout) if answers is not None else None
    talk_rows = min(batch - 1, max(1, round(batch * answer_share))) if talk else 0
    heads = DraftHeads(model.config.hidden_size, num_heads).to(runner.device)  # fp32 master weights

    held = held_states(runner, corpus.held, batch)
    talk_held = held_states(runner, talk.held, batch) if talk else []

    def scores() -> tuple[HeadScores, HeadScores | None]:
        return (score(runner, heads, held) if held else HeadScores([], 0.0),
                score(runner, heads, talk_held) if talk_held else None)

    before, answers_before = scores()
    opt = torch.optim.AdamW(heads.parameters(), lr=lr, weight_decay=0.0)
    losses, window, t0 = [], [], time.perf_counter()
    step = 0
    while step < steps:  # max_seconds may shorten `steps` after the first steps
        for group in opt.param_groups:  # linear warm-up over 5% of the run, then cosine down to 10%
            warm = min(1.0, (step + 1) / max(1, steps // 20))
            group["lr"] = lr * warm * (0.55 + 0.45 * math.cos(math.pi * step / steps))
        rows = corpus.take(step, batch - talk_rows)
        if talk_rows:
            rows = torch.cat([rows, talk.take(step, talk_rows)])
        hidden, greedy = target_states(runner, rows)
        L, H = hidden.shape[1], hidden.shape[2]
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for k in range(num_heads):  # one head's graph alive at a time (its logits are the memory)
            rows = hidden[:, : L - k - 1].reshape(-1, H)
            labels = greedy[:, k + 1 :].reshape(-1)
            loss = LOSS_DECAY**k * F.cross_entropy(_head_logits(heads, k, rows, weight).float(), labels)
            loss.backward()
            total += loss.item()
        opt.step()
        window.append(total)
        step += 1
        if max_seconds and step == 3:
            fit = max(step, int(max_seconds / ((time.perf_counter() - t0) / step)))
            if fit < steps:
                steps = fit
                log(f"{steps} steps fit in {max_seconds:.0f} s")
        if step % max(1, steps // 10) == 0 or step == steps:
            losses.append(round(sum(window) / len(window), 4))
            window = []
            log(f"step {step}/{steps}: loss {losses[-1]:.3f} ({time.perf_counter() - t0:.0f} s)")
    seconds = time.perf_counter() - t0
    after, answers_after = scores()
    report = TrainReport(model=name, heads=num_heads, steps=steps, tokens=steps * batch * chunks.shape[1],
                         seconds=round(seconds, 1), corpus_files=0, corpus_tokens=chunks.numel(),
                         before=before, after=after, losses=losses,
                         answer_tokens=answers.numel() if answers is not None else 0,
                         answers_before=answers_before, answers_after=answers_after)
    return heads.requires_grad_(False), report


def train_model_heads(model: str, corpus: list[str], num_heads: int = 3, steps: int = 600, batch: int = 16,
                      seq_len: int = 512, lr: float = 1e-3, out: str | None = None, device: str = "auto",
                      log=print, max_seconds: float = 0.0, answers: int = 0,
                      answer_tokens: int = 256, holdout: int = 64) -> tuple[Path, TrainReport]:
    """Train heads for `model` (a preset or folder) on the text files under `corpus` (and on the
    target's answers to `answers` requests made from it, each up to `answer_tokens` long) and
    store them next to the model (engine/speculative/heads.py heads_path), or at `out`. Returns the path
    and the report."""
    from engine.config import EngineConfig
    from engine.engine import LLMEngine
    from engine.speculative.heads import heads_path, save_heads

    if num_heads < 1 or steps < 1 or batch < 1 or lr <= 0 or max_seconds < 0 or answers < 0 or answer_tokens < 1:
        raise ValueError(f"need heads, steps, batch, answer tokens >= 1, answers >= 0, lr > 0, max_seconds >= 0; "
                         f"got {num_heads}, {steps}, {batch}, {answer_tokens}, {answers}, {lr}, {max_seconds}")
    if seq_len <= 2 * num_heads:
        raise ValueError(f"seq_len must exceed twice the heads ({2 * num_heads}), got {seq_len}")
    texts = read_corpus(corpus)
    if not texts:
        raise ValueError(f"no text files ({', '.join(TEXT_SUFFIXES)}) under {', '.join(map(str, corpus))}")
    # One eager engine: its continuous batch writes the answers, its runner's prefill trains.
    seats = max(batch, min(answers, ANSWER_BATCH))
    longest = seq_len + 64
    if answers:
        from engine.loader.registry import resolve
        from engine.tokenizer import Tokenizer

        requests = answer_requests(Tokenizer(resolve(model)), texts, answers, answer_tokens)
        longest = max(longest, max(len(r.prompt_ids) for r in requests) + answer_tokens + 64)
    cfg = EngineConfig(model=model, device=device, enforce_eager=True, int8_head=False, max_num_seqs=seats,
                       max_model_len=longest, max_batch_tokens=max(batch * seq_len, longest),
                       kv_cache_tokens=max(batch * (seq_len + 64), seats * longest), enable_prefix_caching=False)
    engine = LLMEngine(cfg)
    runner = engine.runner
    chunks = chunk_tokens(runner.tokenizer, texts, seq_len)
    log(f"corpus: {len(texts)} files, {chunks.numel()} tokens in {len(chunks)} chunks of {seq_len}")
    talk = None
    if answers:
        t = time.perf_counter()
        try:
            talk = chunk_ids(generate_answers(engine, requests), seq_len)
        except ValueError as exc:
            raise ValueError(f"the answers have {exc}: ask for more (--answers)") from None
        log(f"answers: {answers} requests written in {time.perf_counter() - t:.0f} s, "
            f"{talk.numel()} tokens in {len(talk)} chunks")
    heads, report = train_heads(runner, chunks, num_heads, steps, batch, lr, holdout, log=log, name=model,
                                max_seconds=max_seconds, answers=talk)
    report.corpus_files = len(texts)
    report.answers = answers
    path = Path(out) if out else heads_path(runner.folder)
    save_heads(heads, path, report.info())
    log(f"heads: top-1 {report.before.top1} -> {report.after.top1}, accepted per step "
        f"{report.before.chain} -> {report.after.chain}; saved to {path}")
    if report.answers_after is not None:
        log(f"on held-out answers: top-1 {report.answers_before.top1} -> {report.answers_after.top1}, "
            f"accepted per step {report.answers_before.chain} -> {report.answers_after.chain}")
    return path, report
