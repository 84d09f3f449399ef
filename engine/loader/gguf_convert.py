"""Convert a GGUF file (llama.cpp's format) into the engine's cached form: an HF-layout folder.

The folder holds `config.json`, `model.safetensors` (dequantized to fp32, HF tensor names),
`tokenizer.json`, `tokenizer_config.json` (with the chat template) and `generation_config.json`,
so transformers and vLLM load it as they load any HF checkpoint, and the engine loads it in
seconds. GGUF is data, not code: only its tensors and metadata are read.

One trap: for `llama`-architecture files, llama.cpp's converter permutes the rows of the q and k
projections for its own RoPE layout; they are permuted back here. `qwen2`/`qwen3` are stored as-is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from safetensors.torch import save_file

from engine.models.config import SUPPORTED_ARCHITECTURES, UnsupportedModelError

HF_CLASS = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
            "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}

# GGUF tensor name (after "blk.N.") -> HF name (after "model.layers.N.")
LAYER_TENSORS = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}
GLOBAL_TENSORS = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}

# Split regexes by `tokenizer.ggml.pre`, as the models' own tokenizer.json files define them.
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def _pre_tokenizer(pre: str) -> dict:
    def split(regex: str) -> dict:
        return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}

    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    if pre in ("qwen2", "deepseek-r1-qwen"):
        steps = [split(_QWEN2_SPLIT), byte_level]
    elif pre in ("llama3", "llama-bpe", "llama-v3", "smaug-bpe"):
        steps = [split(_LLAMA3_SPLIT), byte_level]
    elif pre in ("smollm", "starcoder", "refact"):
        # SmolLM2's own tokenizer: every digit alone, then GPT-2's split.
        steps = [{"type": "Digits", "individual_digits": True}, split(_GPT2_SPLIT), byte_level]
    elif pre in ("gpt2", "default"):
        steps = [split(_GPT2_SPLIT), byte_level]
    else:
        raise UnsupportedModelError(f"unsupported GGUF tokenizer pre-tokenizer {pre!r}")
    return {"type": "Sequence", "pretokenizers": steps}


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def build_tokenizer_json(reader) -> dict:
    """A `tokenizers` tokenizer.json for the byte-level BPE vocabulary a GGUF file carries."""
    model = _field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise UnsupportedModelError(f"unsupported GGUF tokenizer model {model!r} (only byte-level BPE 'gpt2')")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    types = _field(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = _field(reader, "tokenizer.ggml.merges")
    pre = _field(reader, "tokenizer.ggml.pre", "default")
    added = [
        {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": t == 3}
        for i, (tok, t) in enumerate(zip(tokens, types)) if t in (3, 4)  # CONTROL, USER_DEFINED
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"} if pre.startswith("qwen") else None,
        "pre_tokenizer": _pre_tokenizer(pre),
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": {tok: i for i, tok in enumerate(tokens)},
            "merges": [m.split(" ", 1) for m in merges],
        },
    }


def build_configs(reader) -> tuple[dict, dict, dict]:
    """(config.json, tokenizer_config.json, generation_config.json) from GGUF metadata."""
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedModelError(f"unsupported GGUF architecture {arch!r}")

    def meta(key, default=None):
        return _field(reader, f"{arch}.{key}", default)

    tokens = _field(reader, "tokenizer.ggml.tokens")
    names = {t.name for t in reader.tensors}
    num_heads = meta("attention.head_count")
    hidden = meta("embedding_length")
    bos, eos = _field(reader, "tokenizer.ggml.bos_token_id"), _field(reader, "tokenizer.ggml.eos_token_id")
    eos_ids = [i for i in (eos, _field(reader, "tokenizer.ggml.eot_token_id")) if i is not None]
    template = _field(reader, "tokenizer.chat_template")
    # Chat models end a turn with one of these; stop on each the vocabulary has.
    index = {tok: i for i, tok in enumerate(tokens)}
    for special in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
        if special in index and index[special] not in eos_ids:
            eos_ids.append(index[special])
    config = {
        "architectures": [HF_CLASS[arch]],
        "model_type": arch,
        "vocab_size": len(tokens),
        "hidden_size": hidden,
        "intermediate_size": meta("feed_forward_length"),
        "num_hidden_layers": meta("block_count"),
        "num_attention_heads": num_heads,
        "num_key_value_heads": meta("attention.head_count_kv", num_heads),
        "head_dim": meta("attention.key_length") or meta("rope.dimension_count") or hidden // num_heads,
        "rms_norm_eps": float(meta("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(meta("rope.freq_base", 10000.0)),
        "max_position_embeddings": meta("context_length"),
        "tie_word_embeddings": "output.weight" not in names,
        "bos_token_id": bos,
        "eos_token_id": eos_ids[0] if len(eos_ids) == 1 else eos_ids,
        "torch_dtype": "float32",
    }
    if arch == "qwen2":
        config["use_sliding_window"] = False
    if arch in ("llama", "mistral"):
        config["attention_bias"] = "blk.0.attn_q.bias" in names
    tok_config = {
        "chat_template": template,
        "bos_token": tokens[bos] if bos is not None else None,
        "eos_token": tokens[eos] if eos is not None else None,
        "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": False,
        "model_max_length": config["max_position_embeddings"],
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    gen_config = {"bos_token_id": bos, "eos_token_id": eos_ids}
    return config, tok_config, gen_config


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (rows grouped by rotary pair -> HF's rotate-half order)."""
    # llama.cpp wrote w.reshape(n_head, 2, d, ...).swapaxes(1, 2); this is its inverse.
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_tensor_name(gguf_name: str) -> str:
    stem, _, suffix = gguf_name.rpartition(".")
    if stem.startswith("blk."):
        _, layer, part = stem.split(".", 2)
        if part not in LAYER_TENSORS:
            raise UnsupportedModelError(f"unexpected GGUF tensor {gguf_name!r}")
        return f"model.layers.{layer}.{LAYER_TENSORS[part]}.{suffix}"
    if stem not in GLOBAL_TENSORS:
        raise UnsupportedModelError(f"unexpected GGUF tensor {gguf_name!r}")
    return f"{GLOBAL_TENSORS[stem]}.{suffix}"


def convert_gguf(gguf_path: str | Path, out_dir: str | Path,
                 progress: Callable[[int, int], None] | None = None) -> Path:
    """Write the HF-layout folder for `gguf_path` into `out_dir` (created; must not exist yet)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(gguf_path))
    config, tok_config, gen_config = build_configs(reader)
    tokenizer = build_tokenizer_json(reader)
    arch = config["model_type"]
    tensors = {}
    for i, t in enumerate(reader.tensors):
        w = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        w = w.reshape([int(n) for n in reversed(t.shape)]) if w.ndim > 1 or len(t.shape) > 1 else w
        name = hf_tensor_name(t.name)
        if arch == "llama" and name.endswith(("q_proj.weight", "q_proj.bias")):
            w = _unpermute(w, config["num_attention_heads"])
        elif arch == "llama" and name.endswith(("k_proj.weight", "k_proj.bias")):
            w = _unpermute(w, config["num_key_value_heads"])
        tensors[name] = torch.from_numpy(np.array(w, dtype=np.float32, order="C"))
        if progress:
            progress(i + 1, len(reader.tensors))
    out = Path(out_dir)
    out.mkdir(parents=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
    (out / "generation_config.json").write_text(json.dumps(gen_config, indent=2))
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    return out
