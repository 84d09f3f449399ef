import os

import pytest
import torch

# Without a GPU the kernels run in Triton's interpreter, which must be chosen before a kernel
# module is imported (triton.jit reads it at decoration time).
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(scope="session")
def interpreter_rows_invariant():
    """Skips a test of bit-identical rows where Triton's interpreter cannot give them. The
    interpreter computes tl.dot with numpy's BLAS, whose float32 GEMM on some CPUs sums a row
    differently by its place in the tile (OpenBLAS's Haswell kernels on an AVX2-only AMD EPYC);
    the kernels' row invariance is a GPU property, checked natively by device job kernels_inv."""
    if torch.cuda.is_available():
        return
    import numpy as np

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((16, 128), np.float32), rng.standard_normal((128, 32), np.float32)
    tile = x @ w
    for i in range(16):
        alone = np.zeros_like(x)
        alone[0] = x[i]
        if not np.array_equal((alone @ w)[0], tile[i]):
            pytest.skip(f"numpy's BLAS ({np.__version__}) sums a tile's row {i} differently alone: "
                        "the interpreter's tl.dot is not row-invariant on this CPU")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A 2-layer random Mistral: the 0.5B model's GQA ratio (14 query heads on 2 KV heads), head dim
    64, a sliding window; a word-level tokenizer."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models

    cfg = transformers.MistralConfig(vocab_size=211, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=14, num_key_value_heads=2, head_dim=64, sliding_window=40,
                                     max_position_embeddings=512)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-mistral")
    transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(folder)
    Tokenizer(models.WordLevel({f"t{i}": i for i in range(211)}, unk_token="t0")).save(str(folder / "tokenizer.json"))
    return folder
