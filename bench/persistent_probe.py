"""Whether one persistent kernel could run a step's projections near the weight-read floor.

Issue 35's "0.5B step at <= 3x its floor" is not met: the 16-row step launches ~280 kernels of a
few µs each, and its kernels alone sum to 3.9x the floor (bench/RESULTS.md, "Verify step against
the weight-read floor"). What would reach it is fewer kernels, at the limit one persistent kernel
a step. This probes that design on its largest part, the four projections of every layer, before
an engine kernel is written: one Triton kernel of one program per SM walks the layers, each
projection's work (tiles of 16-128 columns x chunks of 64 or 128 inputs of its weight) divided
evenly among the programs (a tile's run of chunks summed in registers, then added to the fp32
output atomically), SiLU-and-mul between gate|up and down, and a grid barrier after every
projection (an atomic counter each program adds to, then waits on). Optionally each projection
first asks the L2 cache for the next one's weights (`prefetch_bytes`), which do not depend
on the activations, so memory streams through the barriers (the design of the megakernels of
Hazy Research's "Look Ma, no bubbles" and of Mirage's persistent kernel, here in Triton). Left
out: the attention, the norms, RoPE, the lm_head; so the figures are a lower bound for that
design, against the same projections as cuBLAS runs them (one CUDA graph of the 4 x L matmuls
and the SiLU-and-mul).

Printed, µs of one step's projections: cuBLAS in a graph, the persistent kernel at each variant
(tile x chunk, pipeline stages, prefetch; its error against torch on one layer), the same kernel
with no work (its launch and barriers alone; with the prefetches issued, which nothing waits on,
though back-to-back replays queue behind them), and the floor (the weights over the card's
bandwidth). The persistent kernel needs every program resident at once (one per SM, nothing else
on the GPU): a probe, not an engine path. Figures: bench/RESULTS.md, "Verify step against the
weight-read floor" (on an H100, tiles of 128 x 128 pipelined 3 deep beat cuBLAS in a graph, and
every variant with the prefetch lost).

    python -m bench.persistent_probe [--shapes 0.5b 1.5b] [--rows 16]
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from bench.common import graphed, header, save_json, table
from bench.step_time import SHAPES, floor_bandwidth

class Variant(NamedTuple):
    """One way of running the kernel: a tile's columns x a chunk's inputs, the chunk loop's
    pipeline stages, the L2 prefetch of the next projection's weights, and warps a program."""

    block_n: int
    block_k: int
    stages: int = 1
    prefetch: bool = False
    warps: int = 4


FIRST_ROUND = [Variant(16, 128), Variant(32, 128), Variant(64, 128)]  # nothing pipelined or prefetched
VARIANTS = FIRST_ROUND + [
    Variant(n, k, s) for n in (32, 64, 128) for k in (64, 128) for s in (1, 3) if Variant(n, k, s) not in FIRST_ROUND
] + [Variant(n, k, s, True, w) for w in (4, 8) for n in (32, 64, 128) for k in (64, 128) for s in (1, 3) if w == 4 or n >= 64]


@triton.jit
def _grid_barrier(counter, target):
    """Wait until every program has arrived here (`target`: programs x barriers so far)."""
    tl.debug_barrier()  # the program's stores before its arrival (release is cumulative)
    tl.atomic_add(counter, 1, sem="release")
    while tl.atomic_add(counter, 0, sem="acquire") < target:
        pass


@triton.jit
def prefetch_bytes(base, nbytes, pid, programs, THREADS: tl.constexpr):
    """Ask L2 for bytes [0, nbytes) from `base` (16-byte aligned), this program's share: each of
    its threads one `cp.async.bulk.prefetch.L2` (sm_90; inline PTX, Triton has no op for it) of a
    piece, a multiple of 16 bytes (a tail under 16 is left). A hint: nothing waits on it."""
    per = tl.cdiv(tl.cdiv(nbytes, programs * THREADS), 16) * 16
    off = (pid * THREADS + tl.arange(0, THREADS)).to(tl.int64) * per
    size = (tl.minimum(tl.maximum(nbytes - off, 0), per) // 16 * 16).to(tl.int32)
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.gt.s32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [base.to(tl.pointer_type(tl.int8)) + off, size], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _projection(x_ptr, w_ptr, out_ptr, N, K, stride_x, stride_out, pid, programs, SILU: tl.constexpr,
                M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr,
                WORK: tl.constexpr):
    """out[M, N] += x[M, K] @ w[N, K].T over this program's share of the (tile, chunk) items, a
    tile's run of chunks summed in registers (a loop pipelined `STAGES` deep) and added atomically;
    x read as fp32 and cast to w's dtype (SILU: x is [gate | up], 2K wide, read as silu(gate) * up)."""
    chunks = K // BLOCK_K
    items = (N // BLOCK_N) * chunks
    per = tl.cdiv(items, programs)
    start = pid * per
    end = tl.minimum(start + per, items)
    rm = tl.arange(0, M)
    rk = tl.arange(0, BLOCK_K)
    rn = tl.arange(0, BLOCK_N)
    if WORK:
        for tile in range(start // chunks, (end + chunks - 1) // chunks):
            acc = tl.zeros((M, BLOCK_N), dtype=tl.float32)
            cols = tile * BLOCK_N + rn
            lo = tl.maximum(start - tile * chunks, 0)
            for c in tl.range(lo, tl.minimum(end - tile * chunks, chunks), num_stages=STAGES):
                kk = c * BLOCK_K + rk
                x = tl.load(x_ptr + rm[:, None] * stride_x + kk[None, :])
                if SILU:
                    up = tl.load(x_ptr + rm[:, None] * stride_x + K + kk[None, :])
                    x = x / (1.0 + tl.exp(-x)) * up
                w = tl.load(w_ptr + cols[:, None] * K + kk[None, :])  # [BLOCK_N, BLOCK_K], rows contiguous
                acc = tl.dot(x.to(w.dtype), tl.trans(w), acc)
            tl.atomic_add(out_ptr + rm[:, None] * stride_out + cols[None, :], acc, sem="relaxed")


@triton.jit
def _zero(ptr, numel, pid, programs, BLOCK: tl.constexpr):
    """This program's share of ptr[:numel] set to 0."""
    per = tl.cdiv(tl.cdiv(numel, programs), BLOCK) * BLOCK
    for off in range(pid * per, tl.minimum(pid * per + per, numel), BLOCK):
        idx = off + tl.arange(0, BLOCK)
        tl.store(ptr + idx, tl.zeros([BLOCK], tl.float32), mask=idx < numel)


@triton.jit
def _layers(x_ptr, w0, w1, w2, w3, bufs, counter, L, stride_buf, buf_numel, ahead,
            N0, K0, N1, K1, N2, K2, N3, K3, M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
            STAGES: tl.constexpr, PREFETCH: tl.constexpr, THREADS: tl.constexpr, WORK: tl.constexpr):
    """Every layer's four projections, a grid barrier after each. Three fp32 buffers [M, widest]
    rotate: projection i reads buffer (i-1) % 3 (x for the first), adds into i % 3 (zeroed during
    i - 1) and zeroes (i+1) % 3, which projection i - 2 wrote and i - 1 read. PREFETCH: projection
    i first asks L2 for the first `ahead` bytes of projection i + 1's weights (the first projection
    for its own too). All projections' weights as one row: bf16 [N, K] per layer, contiguous."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    if PREFETCH:
        prefetch_bytes(w0, tl.minimum(N0 * K0 * 2, ahead), pid, programs, THREADS)
    for layer32 in range(L):
        layer = tl.full([], 0, tl.int64) + layer32  # a 7B's weights pass 2**31 elements
        for p in tl.static_range(4):
            i = layer * 4 + p
            if PREFETCH:
                if p == 0:
                    prefetch_bytes(w1 + layer * N1 * K1, tl.minimum(N1 * K1 * 2, ahead), pid, programs, THREADS)
                elif p == 1:
                    prefetch_bytes(w2 + layer * N2 * K2, tl.minimum(N2 * K2 * 2, ahead), pid, programs, THREADS)
                elif p == 2:
                    prefetch_bytes(w3 + layer * N3 * K3, tl.minimum(N3 * K3 * 2, ahead), pid, programs, THREADS)
                elif layer + 1 < L:
                    prefetch_bytes(w0 + (layer + 1) * N0 * K0, tl.minimum(N0 * K0 * 2, ahead), pid, programs, THREADS)
            src = bufs + ((i + 2) % 3) * buf_numel
            dst = bufs + (i % 3) * buf_numel
            _zero(bufs + ((i + 1) % 3) * buf_numel, buf_numel, pid, programs, 1024)
            if p == 0:
                _projection(tl.where(i == 0, x_ptr, src), w0 + layer * N0 * K0, dst, N0, K0, stride_buf, stride_buf,
                            pid, programs, False, M, BLOCK_N, BLOCK_K, STAGES, WORK)
            elif p == 1:
                _projection(src, w1 + layer * N1 * K1, dst, N1, K1, stride_buf, stride_buf, pid, programs, False, M,
                            BLOCK_N, BLOCK_K, STAGES, WORK)
            elif p == 2:
                _projection(src, w2 + layer * N2 * K2, dst, N2, K2, stride_buf, stride_buf, pid, programs, False, M,
                            BLOCK_N, BLOCK_K, STAGES, WORK)
            else:
                _projection(src, w3 + layer * N3 * K3, dst, N3, K3, stride_buf, stride_buf, pid, programs, True, M,
                            BLOCK_N, BLOCK_K, STAGES, WORK)
            _grid_barrier(counter, programs * (i + 1))


def persistent(x: torch.Tensor, weights: list[torch.Tensor], bufs: torch.Tensor, counter: torch.Tensor,
               programs: int, work: bool = True, variant: Variant = Variant(32, 128),
               ahead: int = 24 << 20) -> torch.Tensor:
    """The projections of every layer in one launch (x [M, K0] fp32; weights [L, N, K] bf16 each;
    bufs [3, M, widest] fp32, the first zeroed; counter [1] int32, zeroed): the last layer's down
    output. prefetch: each projection's first `ahead` bytes asked of L2 one projection early (a
    GPU of sm_90 or later; the interpreter cannot run it): `variant.prefetch`."""
    L = weights[0].shape[0]
    (n0, k0), (n1, k1), (n2, k2), (n3, k3) = [w.shape[1:] for w in weights]
    M = x.shape[0]
    assert x.stride(0) == bufs.stride(1) and bufs.is_contiguous() and all(w.is_contiguous() for w in weights)
    assert not variant.prefetch or all(w.element_size() == 2 for w in weights), "the prefetch counts bf16 bytes"
    _layers[(programs,)](x, *weights, bufs, counter, L, bufs.stride(1), bufs[0].numel(), ahead,
                         n0, k0, n1, k1, n2, k2, n3, k3, M=M, BLOCK_N=variant.block_n, BLOCK_K=variant.block_k,
                         STAGES=variant.stages, PREFETCH=variant.prefetch, THREADS=32 * variant.warps, WORK=work,
                         num_warps=variant.warps)
    return bufs[(4 * L - 1) % 3, :, :n3]


def ptx(variant: Variant) -> str:
    """The kernel's PTX for sm_90 (no GPU needed; Triton's own ptxas checks it)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    ints = ["L", "stride_buf", "buf_numel", "ahead", "N0", "K0", "N1", "K1", "N2", "K2", "N3", "K3"]
    signature = {"x_ptr": "*fp32", **{f"w{i}": "*bf16" for i in range(4)}, "bufs": "*fp32", "counter": "*i32",
                 **dict.fromkeys(ints, "i32")}
    constexprs = {"M": 16, "BLOCK_N": variant.block_n, "BLOCK_K": variant.block_k, "STAGES": variant.stages,
                  "PREFETCH": variant.prefetch, "THREADS": 32 * variant.warps, "WORK": True}
    source = ASTSource(fn=_layers, signature={**signature, **dict.fromkeys(constexprs, "constexpr")},
                       constexprs=constexprs, attrs={(i,): [["tt.divisibility", 16]] for i in range(7)})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": variant.warps}).asm["ptx"]


def reference(x: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
    """The same projections in torch (fp32 activations cast to the weights' dtype before each)."""
    h = x
    for layer in range(weights[0].shape[0]):
        for p, w in enumerate(weights):
            inp = h[:, : w.shape[2]] if p < 3 else torch.nn.functional.silu(h[:, : w.shape[2]]) * h[:, w.shape[2] : 2 * w.shape[2]]
            h = (inp.to(w.dtype) @ w[layer].T).float()
    return h


def projections(shape: str) -> tuple[int, list[tuple[int, int]]]:
    """(layers, [(N, K) of q|k|v, o, gate|up, down]) of a bench.step_time shape."""
    spec = SHAPES[shape]
    hidden, heads = spec["hidden_size"], spec["num_attention_heads"]
    q = hidden  # heads x head dim
    kv = spec["num_key_value_heads"] * hidden // heads
    inter = spec["intermediate_size"]
    return spec["num_hidden_layers"], [(q + 2 * kv, hidden), (hidden, q), (2 * inter, hidden), (hidden, inter)]


def make(L: int, dims: list[tuple[int, int]], rows: int, device, dtype):
    """Random inputs and weights of `L` layers of projections `dims`, and the kernel's buffers."""
    g = torch.Generator(device="cpu").manual_seed(0)
    weights = [(torch.randn(L, n, k, generator=g) * k**-0.5).to(device, dtype) for n, k in dims]
    widest = max(max(n, k) for n, k in dims)
    x = torch.zeros(rows, widest, device=device)
    x[:, : dims[0][1]] = torch.randn(rows, dims[0][1], generator=g).to(device)
    bufs = torch.zeros(3, rows, widest, device=device)
    return x, weights, bufs, torch.zeros(1, dtype=torch.int32, device=device)


def graph_us(fn, reps: int = 50) -> float:
    """µs of one replay of fn captured in a CUDA graph, the mean of `reps` back to back (the
    weights, 0.7-2.5 GB, outrun the L2 cache: no flush between replays, unlike bench_us)."""
    replay, _ = graphed(fn)
    replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps * 1000


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["0.5b", "1.5b"], choices=["0.5b", "1.5b", "7b"])
    ap.add_argument("--rows", type=int, default=16)
    args = ap.parse_args(argv)
    assert torch.cuda.is_available(), "a CUDA device is needed"
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    bandwidth, card = floor_bandwidth()
    rows, results = [], []
    for shape in args.shapes:
        L, dims = projections(f"qwen2.5-coder-{shape}")
        x, weights, bufs, counter = make(L, dims, args.rows, "cuda", torch.bfloat16)
        first = [w[:1] for w in weights]  # the error is checked on one layer: random weights'
        ref = reference(x, first)  # SiLU-and-mul squares small activations, which reach 0 in a few layers
        floor = sum(w.numel() * w.element_size() for w in weights) / bandwidth * 1e6

        def run(ws, work=True, variant=VARIANTS[0]):
            counter.zero_()
            bufs[0].zero_()
            return persistent(x, ws, bufs, counter, programs, work, variant)

        idle = graph_us(lambda: run(weights, False))
        streamed = graph_us(lambda: run(weights, False, Variant(32, 128, prefetch=True)))
        h = [torch.empty(args.rows, w.shape[1], device="cuda", dtype=torch.bfloat16) for w in weights]
        xb = x[:, : weights[0].shape[2]].to(torch.bfloat16)

        def cublas():
            inp = xb
            for layer in range(L):
                torch.mm(inp, weights[0][layer].T, out=h[0])
                torch.mm(h[0][:, : weights[1].shape[2]], weights[1][layer].T, out=h[1])
                torch.mm(h[1], weights[2][layer].T, out=h[2])
                k3 = weights[3].shape[2]
                torch.mm(torch.nn.functional.silu(h[2][:, :k3]) * h[2][:, k3:], weights[3][layer].T, out=h[3])
                inp = h[3][:, : weights[0].shape[2]]

        theirs = graph_us(cublas)
        rows.append([shape, "cuBLAS, a graph", "", f"{theirs:,.1f}", f"{theirs / floor:.2f}", ""])
        point = {"shape": shape, "layers": L, "floor_us": floor, "cublas_graph_us": theirs,
                 "barriers_only_us": idle, "prefetches_issued_and_barriers_us": streamed, "variants": []}
        for variant in VARIANTS:
            out = run(first, True, variant)
            err = ((out - ref).norm() / ref.norm()).item()
            ours = graph_us(lambda: run(weights, True, variant))
            rows.append([shape, f"persistent{', L2 prefetch' if variant.prefetch else ''}",
                         f"{variant.block_n} x {variant.block_k}, {variant.stages}, {variant.warps}",
                         f"{ours:,.1f}", f"{ours / floor:.2f}", f"{err:.1e}"])
            point["variants"].append({**variant._asdict(), "us": ours, "rel_err": err})
        rows.append([shape, "persistent, no work (launch + barriers)", "", f"{idle:,.1f}", "", ""])
        rows.append([shape, "persistent, no work, L2 prefetches issued (nothing waits on them)", "",
                     f"{streamed:,.1f}", f"{streamed / floor:.2f}", ""])
        rows.append([shape, "floor", "", f"{floor:,.1f}", "1.00", ""])
        results.append(point)
    print(header(f"One persistent kernel for a step's projections, {args.rows} rows, {programs} programs"))
    print(f"floor at {bandwidth / 1e12:.2f} TB/s (the {card}'s)\n")
    print(table(["shape", "projections", "tile x chunk, stages, warps", "us", "x floor", "rel. error"], rows))
    save_json("persistent_probe.json", {"rows": args.rows, "programs": programs, "card": card, "points": results})


if __name__ == "__main__":
    main()
