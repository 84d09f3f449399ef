"""The verify step's small projections at 16 rows: cuBLAS against a Triton tile kernel, by tile.

The batch-1 step of the 0.5B and 1.5B spends ~200-300 µs a step in the attention's q|k|v and o
projections, cuBLAS kernels that read their weights at 0.4-1.1 TB/s (bench/RESULTS.md, "Verify step
against the weight-read floor"). Whether a Triton kernel with one output tile per program and
the whole K in each (kernels/invariant_linear's, its tile shape varied here) reads them faster is
what this measures, before a kernel is written for the engine. Each call is captured alone in a
CUDA graph and timed with triton.testing.do_bench, which flushes the L2 cache between replays
(a layer's weights are not in L2 when the layer runs); a tiny kernel replayed the same way gives
the figures' fixed part. "TB/s" is the weight's bytes over the time.

    python -m bench.linear_small [--rows 16]

`--mlp`: the MLP's gate/up projection and SiLU-and-mul as the engine runs them unfused (a cuBLAS
GEMM, then kernels/fused_ops' SiLU-and-mul: two kernels in one graph) against
kernels/fused_ops/gate_up.py's one kernel, by tile, at each of `--rows`. `--qkv`: the same for the
q|k|v projection (with its bias) and RoPE with the cache write against qkv_rope.py's kernel.

    python -m bench.linear_small --mlp --qkv --rows 16 64
"""

from __future__ import annotations

import argparse
import itertools

import torch

from bench.common import bench_us, header, save_json, table

# (model, projection, N, K, bias): Qwen2.5-Coder's q|k|v (with bias) and o of one layer
SHAPES = [("0.5B", "qkv", 1152, 896, True), ("0.5B", "o", 896, 896, False),
          ("1.5B", "qkv", 2048, 1536, True), ("1.5B", "o", 1536, 1536, False)]
TILES = list(itertools.product((16, 32, 64), (128, 256), (4,), (3, 4)))  # BLOCK_N, BLOCK_K, warps, stages
# (model, intermediate I, hidden K): the gate/up projection's weight is [2 * I, K]
MLP_SHAPES = [("0.5B", 4864, 896), ("1.5B", 8960, 1536)]
MLP_TILES = list(itertools.product((16, 32, 64), (64, 128, 256), (4,), (3, 4)))
# (model, H, Hkv, D, hidden K): the q|k|v projection's weight is [(H + 2 * Hkv) * D, K]
QKV_SHAPES = [("0.5B", 14, 2, 64, 896), ("1.5B", 12, 2, 128, 1536)]
QKV_TILES = list(itertools.product((16, 32), (64, 128, 256), (2, 4), (3, 4)))


def triton_linear(x, w, bias, block_n: int, block_k: int, warps: int, stages: int):
    import triton

    from kernels.invariant_linear.fixed_tiles import _linear_kernel

    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    block_m = max(16, 1 << (M - 1).bit_length())
    _linear_kernel[(triton.cdiv(N, block_n), triton.cdiv(M, block_m))](
        x_ptr=x, w_ptr=w, bias_ptr=bias if bias is not None else w, out_ptr=out, M=M, N=N, K=K,
        stride_xm=x.stride(0), stride_wn=w.stride(0), stride_om=out.stride(0), HAS_BIAS=bias is not None,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, DOT_FP32=False, PRECISION=None, PDL=False,
        num_warps=warps, num_stages=stages)
    return out


def fused(kind: str, rows_list: list[int], floor: float) -> None:
    """`kind` "mlp" or "qkv": the unfused pair of kernels against the fused one, by tile, at each row count."""
    from kernels.fused_ops.fused import rotary_to_cache_triton, silu_and_mul_triton
    from kernels.fused_ops.gate_up import TILE as MLP_TILE
    from kernels.fused_ops.gate_up import gate_up_silu_triton
    from kernels.fused_ops.qkv_rope import TILE as QKV_TILE
    from kernels.fused_ops.qkv_rope import qkv_rope_to_cache_triton

    g = torch.Generator(device="cuda").manual_seed(0)
    columns = ["model", "rows", "N x K", "engine", "us", "TB/s", "err"]
    rows, results = [], []
    shapes = MLP_SHAPES if kind == "mlp" else QKV_SHAPES
    for (model, *shape), M in itertools.product(shapes, rows_list):
        if kind == "mlp":
            I, K = shape
            N = 2 * I
        else:
            H, Hkv, D, K = shape
            N = (H + 2 * Hkv) * D
        x = torch.randn(M, K, device="cuda", generator=g, dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", generator=g, dtype=torch.bfloat16) / K**0.5
        if kind == "mlp":
            unfused = lambda: silu_and_mul_triton(torch.nn.functional.linear(x, w))  # noqa: E731
            fused_fn = lambda tile: gate_up_silu_triton(x, w, tile)  # noqa: E731
            tiles, default = MLP_TILES, MLP_TILE
        else:
            bias = torch.randn(N, device="cuda", generator=g, dtype=torch.bfloat16)
            angles = torch.rand(M, 1, D // 2, device="cuda", generator=g) * 1000
            cos, sin = (torch.cat((f(angles), f(angles)), -1).to(torch.bfloat16) for f in (torch.cos, torch.sin))
            caches = [torch.zeros(4096, Hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
            slots = torch.arange(100, 100 + M, device="cuda")

            def unfused():
                q, k, v = torch.nn.functional.linear(x, w, bias).split([H * D, Hkv * D, Hkv * D], dim=-1)
                return rotary_to_cache_triton(q.view(M, H, D), k.view(M, Hkv, D), v.view(M, Hkv, D), cos, sin,
                                              *caches, slots)

            fused_fn = lambda tile: qkv_rope_to_cache_triton(x, w, bias, cos, sin, *caches, slots, H, tile)  # noqa: E731
            tiles, default = QKV_TILES, QKV_TILE
        ref = unfused()
        mb = N * K * 2 / 1e6

        def add(engine, us, err=0.0):
            rows.append([model, M, f"{N}x{K}", engine, us, mb / us, f"{err:.1e}"])
            results.append(dict(model=model, rows=M, N=N, K=K, engine=engine, us=us, err=err))

        add("cuBLAS + " + ("SiLU-and-mul" if kind == "mlp" else "RoPE-to-cache"), bench_us(unfused))
        for tile in tiles:
            fn = lambda: fused_fn(tile)  # noqa: E731
            try:
                err = ((fn().float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                add(f"fused {'n' if kind == 'mlp' else 'half'}{tile[0]} k{tile[1]} w{tile[2]} s{tile[3]}"
                    + (" (default)" if tile == default else ""), bench_us(fn), err)
            except Exception as e:  # noqa: BLE001 (a tile out of resources: skip it)
                print(f"skip {model} {M} {tile}: {type(e).__name__}: {e}"[:300])
        print(table(columns, [r for r in rows if r[:2] == [model, M]]), flush=True)
    print(header(f"{kind} projection fused (bench.linear_small --{kind}); a tiny kernel's replay: {floor:.1f} us"))
    print(table(columns, rows))
    save_json(f"linear_small_{kind}.json", {"tiny_kernel_us": floor, "points": results})


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, nargs="+", default=[16], help="the rows of a step (the projections: the first)")
    ap.add_argument("--mlp", action="store_true", help="the gate/up projection and SiLU-and-mul, fused or not")
    ap.add_argument("--qkv", action="store_true", help="the q|k|v projection and RoPE-to-cache, fused or not")
    args = ap.parse_args(argv)
    assert torch.cuda.is_available(), "a CUDA device is needed"
    tiny = torch.zeros(1024, device="cuda")
    floor = bench_us(lambda: tiny.add_(1))
    if args.mlp or args.qkv:
        for kind in ("mlp",) * args.mlp + ("qkv",) * args.qkv:
            fused(kind, args.rows, floor)
        return
    g = torch.Generator(device="cuda").manual_seed(0)
    n_rows = args.rows[0]
    rows, results = [], []
    for model, name, N, K, has_bias in SHAPES:
        x = torch.randn(n_rows, K, device="cuda", generator=g, dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", generator=g, dtype=torch.bfloat16) / K**0.5
        bias = torch.randn(N, device="cuda", generator=g, dtype=torch.bfloat16) if has_bias else None
        ref = torch.nn.functional.linear(x, w, bias)
        mb = N * K * 2 / 1e6

        def add(engine, us, err=0.0):
            rows.append([model, name, f"{N}x{K}", engine, us, mb / us, f"{err:.1e}"])
            results.append(dict(model=model, projection=name, N=N, K=K, engine=engine, us=us, err=err))

        add("cuBLAS (F.linear)", bench_us(lambda: torch.nn.functional.linear(x, w, bias)))
        for block_n, block_k, warps, stages in TILES:
            fn = lambda: triton_linear(x, w, bias, block_n, block_k, warps, stages)  # noqa: E731
            try:
                err = ((fn().float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                add(f"triton n{block_n} k{block_k} w{warps} s{stages}", bench_us(fn), err)
            except Exception as e:  # noqa: BLE001 (a tile out of resources: skip it)
                print(f"skip {model} {name} {block_n} {block_k} {warps} {stages}: {type(e).__name__}: {e}"[:300])
        print(table(["model", "projection", "N x K", "engine", "us", "TB/s", "err"],
                    [r for r in rows if r[:2] == [model, name]]), flush=True)
    print(header(f"Small projections at {n_rows} rows (bench.linear_small); a tiny kernel's replay: {floor:.1f} us"))
    print(table(["model", "projection", "N x K", "engine", "us", "TB/s", "err"], rows))
    save_json("linear_small.json", {"rows": n_rows, "tiny_kernel_us": floor, "points": results})


if __name__ == "__main__":
    main()
