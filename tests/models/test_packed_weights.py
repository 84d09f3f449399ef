"""Packed weights on the CPU (engine/models/layers.py `pack_weight`): a packed linear layer
computes the plain one's rows -- bit-identical in bf16, within rounding in fp32 (oneDNN's sums
against MKL's) -- and in batch-invariant mode each row independent of the row count; an engine
with packed weights writes what one without them writes. The real CI model on the CPU, where
packing applies."""

import copy

import pytest
import torch

from engine.config import EngineConfig
from engine.engine import LLMEngine
from engine.models.layers import Linear, onednn_packs
from engine.types import Request, SamplingParams


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_packed_linear_computes_the_plain_ones_rows(dtype):
    if not onednn_packs(dtype):
        pytest.skip(f"oneDNN does not pack {dtype} on this CPU (bf16 needs AVX-512 or AVX-NE-CONVERT): "
                    "the model keeps plain weights (test_a_cpu_that_cannot_pack_keeps_plain_weights)")
    torch.manual_seed(0)
    # A bias, as Qwen's qkv has; 1,536 inputs, where one row's GEMV sums differently from a GEMM.
    plain = Linear(1536, 1152, bias=True).to(dtype).requires_grad_(False)
    packed = copy.deepcopy(plain)
    packed.pack()
    assert packed.weight.numel() == 0  # the plain weight is given up
    x = torch.randn(40, 1536).to(dtype)
    want, got = plain(x), packed(x)
    if dtype == torch.bfloat16:
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    packed.batch_invariant = True
    rows = packed(x)
    for n in (1, 2, 3, 16, 17, 33, 39):
        assert torch.equal(packed(x[:n]), rows[:n])


def test_an_engine_with_packed_weights_writes_the_same_tokens(ci_model_dir):
    tokens = {}
    for packed in (False, True):
        engine = LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=1024, packed_weights=packed))
        assert (engine.runner.model.head_packed is not None) == packed
        prompt = engine.tokenizer.encode("def area(self):\n    \"\"\"The rectangle's area.\"\"\"\n" * 6)
        tokens[packed] = [[t for ev in engine.generate(Request(prompt[:n], SamplingParams(max_tokens=24), drafter=d))
                           for t in ev.token_ids] for n, d in ((len(prompt), "lookup"), (37, "none"))]
    assert tokens[True] == tokens[False]


def test_a_cpu_that_cannot_pack_keeps_plain_weights(ci_model_dir):
    """`can_pack` says yes exactly where packing a real layer's weight works (the probe packs a
    16 x 16 one), and a bf16 engine asked for packed weights builds either way: packed where
    oneDNN packs bf16, plain weights where it refuses them (an AVX2-only CPU) instead of raising."""
    from engine.models.layers import can_pack, pack_weight

    for dtype in (torch.float32, torch.bfloat16):
        weight = torch.randn(1152, 1536).to(dtype)
        try:
            pack_weight(weight)
            packs = torch.backends.mkldnn.is_available()
        except RuntimeError:
            packs = False
        assert can_pack(weight) == packs, dtype
    engine = LLMEngine(EngineConfig(model=str(ci_model_dir), max_model_len=256, dtype="bf16", packed_weights=True))
    assert (engine.runner.model.head_packed is not None) == onednn_packs(torch.bfloat16)
