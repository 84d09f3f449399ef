"""Draft heads: the target drafts its own next tokens from the step it just verified.

A draft model costs a forward per drafted token (the 0.5B's is over half the 1.5B's whole verify
step, bench/RESULTS.md), so it barely pays at batch 1. Medusa's heads cost
almost nothing: head k is one residual block on the target's last hidden state,
`h + silu(W_k h + b_k)`, read out through the target's own lm_head, and it guesses the token k + 1
positions ahead. They run inside every verify step of the target (CausalLM.greedy_rows: the heads'
rows join the step's lm_head GEMM, whose cost is the weight read either way, and its argmax), so
after a step each row's greedy token comes with n guesses of the tokens after it; the row of the
last accepted draft gives the next step's draft (`Sequence.head_draft`). Exactness does not depend
on them: their tokens are a draft like any other.

Heads are trained per target model on its own predictions over a text corpus
(engine/training/heads.py, `editapply train-heads --model MODEL`; a GPU run of minutes) and
stored next to the model (HEADS_FILE). `EDITAPPLY_DRAFT_MODEL=heads` makes them the hybrid drafter's model
(engine/speculative/hybrid.py through `HeadsModel`): lookup leads where it quotes, the heads where it
does not, lookup filling after their tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# Beside the model's files, in a folder of its own (the loader reads every *.safetensors of the model's).
HEADS_FILE = "draft_heads/heads.safetensors"
# The name that selects the target's heads as the hybrid's model (EDITAPPLY_DRAFT_MODEL).
HEADS_MODEL = "heads"


# The heads run in steps of at most this many rows (a batch of four verify blocks of 16). Their
# rows join the step's lm_head GEMM, which at a few dozen rows costs the weight read whatever the
# rows; past that it turns compute-bound and the heads' rows (n per row) would cost real time in
# every crowded step, where lookup alone is what pays anyway (bench/RESULTS.md, concurrency).
HEADS_MAX_ROWS = 64
# On a CPU the rows cost compute much sooner: the 1.5B's lm_head in bf16 (AMX, 2 cores) took 52 /
# 58 / 84 ms at 1 / 16 / 64 rows, so there the heads run in steps of at most 4 rows (16 GEMM rows
# with three heads): those after their own drafts and single tokens, not lookup's long quotes.
HEADS_MAX_ROWS_CPU = 4


def heads_max_rows(device_type: str) -> int:
    """Most rows of a verify step the heads run in, on this device."""
    return HEADS_MAX_ROWS if device_type == "cuda" else HEADS_MAX_ROWS_CPU


class DraftHeads(nn.Module):
    """n residual blocks on the final hidden state: head k maps h to h + silu(W_k h + b_k), whose
    logits through the target's lm_head guess the token k + 1 positions after h's next token.
    W_k starts at zero (each head starts as the target's own next-token guess, Medusa's init)."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_heads, hidden_size, hidden_size))
        self.bias = nn.Parameter(torch.zeros(num_heads, hidden_size))

    @property
    def num_heads(self) -> int:
        return self.weight.shape[0]

    def head_state(self, k: int, hidden: torch.Tensor) -> torch.Tensor:
        """[N, H] -> [N, H]: head k's (0-based) state for every row (what training runs head by head)."""
        return hidden + F.silu(hidden @ self.weight[k].t() + self.bias[k])

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, H] -> [n, N, H]: every head's state for every row (head_state's, all heads in one GEMM)."""
        h = hidden.unsqueeze(0)
        return h + F.silu(torch.baddbmm(self.bias.unsqueeze(1), h.expand(self.num_heads, -1, -1),
                                        self.weight.transpose(1, 2)))


def heads_path(model_folder: Path) -> Path:
    return Path(model_folder) / HEADS_FILE


def save_heads(heads: DraftHeads, path: Path, info: dict) -> None:
    """Write `heads` (fp32 on the CPU) with `info` (the model, the corpus, the figures) as metadata,
    atomically: a file is either the old one or the whole new one."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tensors = {"weight": heads.weight.detach().float().cpu().contiguous(),
               "bias": heads.bias.detach().float().cpu().contiguous()}
    save_file(tensors, str(tmp), metadata={"info": json.dumps(info)})
    tmp.replace(path)


def load_heads(path: Path, hidden_size: int, dtype: torch.dtype, device) -> tuple[DraftHeads, dict]:
    """The heads stored at `path` for a model of `hidden_size`, in `dtype` on `device`, and their info.
    ValueError when they are missing or belong to another model's size."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no draft heads at {path}: train them first "
                         "(editapply train-heads --model MODEL --corpus DIR, on a GPU)")
    with safe_open(str(path), framework="pt") as f:
        weight, bias = f.get_tensor("weight"), f.get_tensor("bias")
        info = json.loads((f.metadata() or {}).get("info", "{}"))
    n, h1, h2 = weight.shape
    if h1 != hidden_size or h2 != hidden_size or bias.shape != (n, hidden_size):
        raise ValueError(f"draft heads at {path} are for hidden size {h1}, not this model's {hidden_size}")
    heads = DraftHeads(hidden_size, n)
    heads.load_state_dict({"weight": weight, "bias": bias})
    return heads.to(device=device, dtype=dtype).requires_grad_(False), info


class HeadsModel:
    """The target's heads as the hybrid drafter's model (engine/speculative/hybrid.py reads a DraftModel's
    interface): always in sync (they read the target's own hidden states), free to run (they run in
    the target's step whether drafts use them or not), and unable to continue another drafter's
    lead (they guess from the last verified row only). `propose` hands out each sequence's
    `head_draft`, left by its last verify step (Scheduler.postprocess)."""

    continues_lead = False
    caught_up = 0
    runner = None  # no runner of its own: the heads live in the target's (ModelRunner.attach_heads)

    def __init__(self, num_heads: int):
        self.max_tokens = num_heads

    def propose(self, jobs: list[tuple[object, list[int], int]], ahead: bool = False) -> list[list[int]]:
        return [[] if lead else list(seq.head_draft[:n]) for seq, lead, n in jobs]

    def lag(self, seq, lead: int) -> int:
        return 0

    def catch_up_seconds(self, jobs) -> float:
        return 0.0

    def draft_seconds(self, d: int, rows: int) -> float:
        return 0.0

    def reset_costs(self) -> None:
        pass

    def release(self, seq_id: str) -> None:
        pass

    def capacity(self) -> None:
        return None  # the heads read the target's own cache: no bound of their own
