"""Our model code against transformers (the reference), on tiny random-weight models of each family.

transformers builds and saves each model as an HF folder; our loader reads that folder; logits
must agree within 1e-4 in fp32, for a whole prompt and for a verify block appended to the cache.
"""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from engine.kv_cache import KVCache  # noqa: E402
from engine.loader.hf_folder import load_model  # noqa: E402
from engine.models.config import ModelConfig, UnsupportedModelError  # noqa: E402
from engine.models.transformer import AttentionMetadata  # noqa: E402

TOL = 1e-4

COMMON = dict(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
FAMILIES = {
    "llama": (transformers.LlamaConfig, {}),
    "llama-rope-llama3": (transformers.LlamaConfig, {"rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}}),
    "llama-rope-linear": (transformers.LlamaConfig, {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    "llama-tied-bias": (transformers.LlamaConfig, {"tie_word_embeddings": True, "attention_bias": True}),
    "mistral": (transformers.MistralConfig, {"sliding_window": 24, "head_dim": 16}),
    "qwen2": (transformers.Qwen2Config, {"tie_word_embeddings": True, "rope_theta": 1e6}),
    "qwen2-yarn": (transformers.Qwen2Config, {"rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}}),
    "qwen3": (transformers.Qwen3Config, {"head_dim": 32}),
}


def run_ours(model, chunks: list[list[int]]) -> torch.Tensor:
    """Feed `chunks` one after another through the cache; logits of every fed token."""
    cfg = model.config
    kv = KVCache(cfg.num_layers, num_blocks=32, block_size=8, num_kv_heads=cfg.num_kv_heads,
                 head_dim=cfg.head_dim, dtype=torch.float32, device="cpu")
    total = sum(len(c) for c in chunks)
    # A scattered block table, so that paging (not contiguity) is what is tested.
    table = kv.allocator.allocate(kv.blocks_for(total) + 3)[::-1][: kv.blocks_for(total)]
    out, start = [], 0
    for chunk in chunks:
        end = start + len(chunk)
        slot_tables = kv.slot_tables([table], end, "cpu")
        meta = AttentionMetadata(slot_mapping=slot_tables[0, start:end], slot_tables=slot_tables,
                                 q_positions=torch.arange(start, end)[None], query_lens=[len(chunk)],
                                 context_lens=[end])
        with torch.no_grad():
            hidden = model(torch.tensor(chunk), torch.arange(start, end), meta, kv.layers)
            out.append(model.compute_logits(hidden))
        start = end
    return torch.cat(out)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    cls, extra = FAMILIES[request.param]
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(cls(**COMMON, **extra), dtype=torch.float32).eval()
    folder = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(folder)
    return request.param, hf, folder


def test_whole_prompt_logits_match(family):
    name, hf, folder = family
    ids = torch.randint(0, COMMON["vocab_size"], (1, 57), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(ids).logits[0]
    ours = run_ours(load_model(folder), [ids[0].tolist()])
    assert (ours - ref).abs().max().item() < TOL, name


def test_verify_block_appended_to_cache_matches(family):
    name, hf, folder = family
    ids = torch.randint(0, COMMON["vocab_size"], (1, 61), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = hf(ids).logits[0]
    seq = ids[0].tolist()
    # prompt of 44, one decode token, then a 16-token verify block on top of the cache
    ours = run_ours(load_model(folder), [seq[:44], seq[44:45], seq[45:61]])
    assert (ours - ref).abs().max().item() < TOL, name


def test_unsupported_architecture_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"]}))
    with pytest.raises(UnsupportedModelError, match="gpt_neox"):
        ModelConfig.from_folder(tmp_path)
