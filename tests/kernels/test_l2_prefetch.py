"""kernels/l2_prefetch.py: the plan of what each layer asks L2 for and where the model forks and
joins (on the CPU), the kernel as sm_90 PTX (the interpreter cannot run its inline PTX; on a GPU
the engine runs it, device job `graphs`: tests/kernels/test_graphs.py)."""

import torch

from kernels.l2_prefetch import plan


def _layer(*sizes):
    return [torch.empty(n, dtype=torch.bfloat16) for n in sizes]  # n elements: 2n bytes


def test_each_layer_asks_for_its_weights_after_the_first_then_the_next_layers_first():
    layers = [_layer(10, 20, 30, 40), _layer(11, 21, 31, 41)]
    first, last = plan(layers, budget=1 << 20)
    assert [(w.numel(), n) for w, n in first] == [(20, 40), (30, 60), (40, 80), (11, 22)]
    assert [(w.numel(), n) for w, n in last] == [(21, 42), (31, 62), (41, 82)]  # no layer after the last


def test_a_layer_asks_for_at_most_the_budget_the_last_piece_cut_short():
    layers = [_layer(10, 20, 30, 40), _layer(11, 21, 31, 41)]
    first, _ = plan(layers, budget=40 + 50)
    assert [(w.numel(), n) for w, n in first] == [(20, 40), (30, 50)]
    assert plan(layers, budget=40 + 60 + 8)[0][-1][0].numel() == 30  # under 16 bytes left: nothing more asked


def test_the_kernel_compiles_to_bulk_l2_prefetches_on_sm90(sm90_ptx):
    ptx = sm90_ptx("""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.l2_prefetch import _prefetch_kernel
signature = {name: t for i in range(4) for name, t in ((f"p{i}", "*bf16"), (f"n{i}", "i64"))}
source = ASTSource(fn=_prefetch_kernel, signature={**signature, "THREADS": "constexpr"}, constexprs={"THREADS": 128},
                   attrs={(i,): [["tt.divisibility", 16]] for i in range(0, 8, 2)})
print(triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"])
""")
    assert ptx.count("cp.async.bulk.prefetch.L2.global") == 4  # one a slot


def test_each_layer_forks_once_its_qkv_has_run_and_the_step_joins(tiny_model, monkeypatch):
    """The model's wiring, on the CPU: a recorder stands in for WeightPrefetch, whose stream and
    kernel need a GPU (device job `graphs` runs the real one in graph and eager steps)."""
    from engine.kv_cache import KVCache
    from engine.loader.hf_folder import load_model
    from engine.models.transformer import AttentionMetadata
    from kernels import l2_prefetch

    events = []

    class Recorder:
        def __init__(self, layers, device):
            assert [len(weights) for weights in layers] == [4, 4]  # q|k|v, o, gate|up, down a layer
            self.plan = plan(layers, budget=1 << 30)

        def fork(self, i):
            events.append(f"fork {i}")

        def join(self):
            events.append("join")

    monkeypatch.setattr(l2_prefetch, "WeightPrefetch", Recorder)
    model = load_model(tiny_model, torch.float32, torch.device("cpu"))
    cfg = model.config
    for i, layer in enumerate(model.layers):
        layer.self_attn.qkv_proj.register_forward_hook(lambda *_, i=i: events.append(f"qkv {i}"))
    kv = KVCache(cfg.num_layers, num_blocks=8, block_size=8, num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
                 dtype=torch.float32, device="cpu")
    slot_tables = kv.slot_tables([kv.allocator.allocate(2)], 10, "cpu")
    meta = AttentionMetadata(slot_mapping=slot_tables[0, :10], slot_tables=slot_tables,
                             q_positions=torch.arange(10)[None], query_lens=[10], context_lens=[10])

    def step():
        with torch.no_grad():
            return model(torch.arange(1, 11), torch.arange(10), meta, kv.layers)

    plain = step()
    model.set_weight_prefetch(True)
    events.clear()
    assert torch.equal(step(), plain)
    assert events == ["qkv 0", "fork 0", "qkv 1", "fork 1", "join"]
    model.set_weight_prefetch(False)
    events.clear()
    step()
    assert events == ["qkv 0", "qkv 1"] and model.prefetch is None
