"""kernels/l2_prefetch.py: the plan of what each layer asks L2 for (on the CPU), the kernel as
sm_90 PTX (the interpreter cannot run its inline PTX; on a GPU the engine runs it, device job
`graphs`: tests/kernels/test_graphs.py)."""

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
