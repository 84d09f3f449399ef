"""Which draft model an engine runs beside its target (the `hybrid` and `draft` drafters).

`load_draft_model(cfg, runner, tokenizer)` gives the engine's `HybridDrafting` (hybrid.py) over
EDITAPPLY_DRAFT_MODEL, or over `default_draft_model`'s choice when that is empty and the drafter
needs one; None when the engine drafts without a model.
"""

from __future__ import annotations

import torch

from engine.loader.registry import PRESETS
from engine.speculative.drafters import MODEL_DRAFTERS
from engine.speculative.heads import HEADS_MODEL, HeadsModel, heads_path, load_heads


def default_draft_model(paired: str, heads_trained: bool, flat_verify: bool) -> str:
    """The target's own draft heads where a verify step of a few tokens costs about a one-token
    step (`flat_verify`: a GPU, or a CPU in bf16) and they were trained; else the preset's paired
    model, whose tokens pay where every fed token costs compute (a CPU in fp32). Measured per
    device in bench/RESULTS.md, "Draft heads".

    Example: ("qwen2.5-coder-0.5b", True, True) -> "heads"; ("qwen2.5-coder-0.5b", True, False) ->
    "qwen2.5-coder-0.5b"; ("", False, True) -> "" (nothing to draft with).
    """
    if flat_verify and heads_trained:
        return HEADS_MODEL
    return paired


def load_draft_model(cfg, runner, tokenizer):
    """The engine's HybridDrafting, or None; ValueError when the drafter needs a model and none
    can be chosen. Heads are attached to the target's `runner` (they run in its steps)."""
    name = cfg.draft_model
    if not name and cfg.drafter in MODEL_DRAFTERS:
        preset = PRESETS.get(cfg.model)
        flat_verify = runner.device.type == "cuda" or runner.dtype == torch.bfloat16
        name = default_draft_model(preset.draft if preset else "", heads_path(runner.folder).is_file(), flat_verify)
        if not name:
            raise ValueError(f"drafter {cfg.drafter!r} needs a draft model: {cfg.model!r} has no "
                             "paired one and no trained draft heads, so set EDITAPPLY_DRAFT_MODEL (a preset "
                             "or folder with its tokenizer) or train heads (`editapply train-heads`)")
    if not name:
        return None
    from engine.speculative.hybrid import HybridDrafting

    if name == HEADS_MODEL:  # the target's own draft heads (heads.py)
        heads, _ = load_heads(heads_path(runner.folder), runner.model_config.hidden_size, runner.dtype, runner.device)
        runner.attach_heads(heads)
        return HybridDrafting(HeadsModel(heads.num_heads), cfg.draft_tokens)
    from engine.speculative.draft_model import DraftModel

    model = DraftModel(cfg, name, tokenizer, runner.model_config.vocab_size)
    return HybridDrafting(model, cfg.draft_tokens)
