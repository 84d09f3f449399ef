"""Training the target's draft heads (engine/spec/heads.py) on its own predictions.

Medusa-1's recipe, self-distilled: the target is frozen; a corpus is cut into chunks of
`seq_len` tokens; for each batch the target runs once (its eager prefill forward, no gradient) and
gives the final hidden state h_t and its own greedy token g_t after every position t. Head k learns
to guess g_{t+k} from h_t: what the target itself would write k + 1 tokens on (its greedy token
g_t is the step's bonus token; g_{t+1} is what head 1 drafts after it), with cross-entropy through
the target's frozen lm_head, heads weighted LOSS_DECAY^(k-1). Labels are the target's choices, not
the corpus's tokens, since verification accepts exactly what the target would write.

A held-out slice of the chunks (`holdout`) is scored before and after: each head's top-1
agreement with its label, and the mean number of leading heads that all agree (the heads' tokens
accepted per step were the target to write the held-out text itself). On the H200 the 1.5B
trains on ~60k tokens a second (batches of 16 x 512); bench/RESULTS.md has two runs.

    editapply train-heads --model MODEL --corpus DIR_OR_FILE... [--heads 3] [--steps 600]
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.spec.heads import DraftHeads

LOSS_DECAY = 0.8  # weight of head k's loss: LOSS_DECAY ** (k - 1) (Medusa's)
TEXT_SUFFIXES = (".py", ".pyi", ".js", ".ts", ".tsx", ".go", ".rs", ".java", ".c", ".h", ".cc", ".cpp", ".hpp",
                 ".rb", ".cs", ".sh", ".lua", ".md", ".rst", ".txt")
MAX_FILE_BYTES = 200_000  # larger files are mostly generated or data


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
    ids: list[int] = []
    sep = tokenizer.encode("\n\n")
    for text in texts:
        ids.extend(tokenizer.encode(text))
        ids.extend(sep)
    n = len(ids) // seq_len
    if n == 0:
        raise ValueError(f"the corpus has {len(ids)} tokens, fewer than one chunk of {seq_len}")
    return torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)


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
def score(runner, heads: DraftHeads, chunks: torch.Tensor, batch: int) -> HeadScores:
    weight = _head_weight(runner.model)
    n, L = heads.num_heads, chunks.shape[1]
    right = torch.zeros(n)
    chain, count = 0.0, 0
    for i in range(0, len(chunks), batch):
        hidden, greedy = target_states(runner, chunks[i : i + batch])
        rows = L - n  # positions where every head has a label
        ok = torch.stack([(_head_logits(heads, k, hidden[:, :rows].reshape(-1, hidden.shape[-1]), weight).argmax(-1)
                           == greedy[:, k + 1 : k + 1 + rows].reshape(-1)).cpu() for k in range(n)])  # [n, N]
        right += ok.float().sum(1)
        chain += ok.int().cumprod(0).sum().item()
        count += ok.shape[1]
    return HeadScores(top1=[round(r / count, 4) for r in right.tolist()], chain=round(chain / count, 4))


def train_heads(runner, chunks: torch.Tensor, num_heads: int = 3, steps: int = 600, batch: int = 16,
                lr: float = 1e-3, holdout: int = 64, log=print, name: str = "",
                max_seconds: float = 0.0) -> tuple[DraftHeads, TrainReport]:
    """Train `num_heads` heads for `runner`'s model on `chunks` [N, L] (module docstring): `steps`
    batches of `batch` chunks, cycling through the chunks in a fixed shuffled order; the last
    `holdout` chunks (at most a fifth) are held out and scored before and after. With
    `max_seconds`, the run is shortened to fit it (timed over its first steps; the learning-rate
    schedule follows the shortened run)."""
    model = runner.model
    weight = _head_weight(model)
    holdout = min(holdout, len(chunks) // 5)
    train, held = chunks[: len(chunks) - holdout], chunks[len(chunks) - holdout :]
    if len(train) == 0:
        raise ValueError("too few chunks to train on")
    heads = DraftHeads(model.config.hidden_size, num_heads).to(runner.device)  # fp32 master weights
    before = score(runner, heads, held, batch) if holdout else HeadScores([], 0.0)
    opt = torch.optim.AdamW(heads.parameters(), lr=lr, weight_decay=0.0)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))
    losses, window, t0 = [], [], time.perf_counter()
    step = 0
    while step < steps:  # max_seconds may shorten `steps` after the first steps
        for group in opt.param_groups:  # linear warm-up over 5% of the run, then cosine down to 10%
            warm = min(1.0, (step + 1) / max(1, steps // 20))
            group["lr"] = lr * warm * (0.55 + 0.45 * math.cos(math.pi * step / steps))
        idx = order[torch.arange(step * batch, (step + 1) * batch) % len(train)]
        hidden, greedy = target_states(runner, train[idx])
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
    after = score(runner, heads, held, batch) if holdout else HeadScores([], 0.0)
    report = TrainReport(model=name, heads=num_heads, steps=steps, tokens=steps * batch * chunks.shape[1],
                         seconds=round(seconds, 1), corpus_files=0, corpus_tokens=chunks.numel(),
                         before=before, after=after, losses=losses)
    return heads.requires_grad_(False), report


def train_model_heads(model: str, corpus: list[str], num_heads: int = 3, steps: int = 600, batch: int = 16,
                      seq_len: int = 512, lr: float = 1e-3, out: str | None = None, device: str = "auto",
                      log=print, max_seconds: float = 0.0) -> tuple[Path, TrainReport]:
    """Train heads for `model` (a preset or folder) on the text files under `corpus` and store them
    next to the model (engine/spec/heads.py heads_path), or at `out`. Returns the path and the report."""
    from engine.config import EngineConfig
    from engine.runner import ModelRunner
    from engine.spec.heads import heads_path, save_heads

    if num_heads < 1 or steps < 1 or batch < 1 or lr <= 0 or max_seconds < 0:
        raise ValueError(f"need heads, steps, batch >= 1, lr > 0, max_seconds >= 0; got {num_heads}, {steps}, "
                         f"{batch}, {lr}, {max_seconds}")
    if seq_len <= 2 * num_heads:
        raise ValueError(f"seq_len must exceed twice the heads ({2 * num_heads}), got {seq_len}")
    texts = read_corpus(corpus)
    if not texts:
        raise ValueError(f"no text files ({', '.join(TEXT_SUFFIXES)}) under {', '.join(map(str, corpus))}")
    cfg = EngineConfig(model=model, device=device, enforce_eager=True, int8_head=False, max_num_seqs=batch,
                       max_model_len=seq_len + 64, max_batch_tokens=batch * seq_len,
                       kv_cache_tokens=batch * (seq_len + 64), enable_prefix_caching=False)
    runner = ModelRunner(cfg)
    chunks = chunk_tokens(runner.tokenizer, texts, seq_len)
    log(f"corpus: {len(texts)} files, {chunks.numel()} tokens in {len(chunks)} chunks of {seq_len}")
    heads, report = train_heads(runner, chunks, num_heads, steps, batch, lr, log=log, name=model,
                                max_seconds=max_seconds)
    report.corpus_files = len(texts)
    path = Path(out) if out else heads_path(runner.folder)
    save_heads(heads, path, report.info())
    log(f"heads: top-1 {report.before.top1} -> {report.after.top1}, accepted per step "
        f"{report.before.chain} -> {report.after.chain}; saved to {path}")
    return path, report
