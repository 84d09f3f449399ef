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


def replay_floor_us() -> float:
    """A tiny kernel's replay, timed as the projections are: the fixed part of every figure."""
    tiny = torch.zeros(1024, device="cuda")
    return bench_us(lambda: tiny.add_(1))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, nargs="+", default=[16])
    args = ap.parse_args(argv)
    assert torch.cuda.is_available(), "a CUDA device is needed"
    for rows in args.rows:
        small_projections(rows)


def small_projections(rows: int) -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    floor = replay_floor_us()
    table_rows, results = [], []
    for model, name, N, K, has_bias in SHAPES:
        x = torch.randn(rows, K, device="cuda", generator=g, dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", generator=g, dtype=torch.bfloat16) / K**0.5
        bias = torch.randn(N, device="cuda", generator=g, dtype=torch.bfloat16) if has_bias else None
        ref = torch.nn.functional.linear(x, w, bias)
        mb = N * K * 2 / 1e6

        def add(engine, us, err=0.0):
            table_rows.append([model, name, f"{N}x{K}", engine, us, mb / us, f"{err:.1e}"])
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
                    [r for r in table_rows if r[:2] == [model, name]]), flush=True)
    print(header(f"Small projections at {rows} rows (bench.linear_small); a tiny kernel's replay: {floor:.1f} us"))
    print(table(["model", "projection", "N x K", "engine", "us", "TB/s", "err"], table_rows))
    save_json("linear_small.json", {"rows": rows, "tiny_kernel_us": floor, "points": results})


if __name__ == "__main__":
    main()
