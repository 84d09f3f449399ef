"""Paged attention micro-benchmark: the Triton split-KV kernel against the reference path and SDPA.

For each model shape (query heads / KV heads / head dim of Qwen2.5-Coder 0.5B, 1.5B, 7B), context
length and query count K (1 = decode, 16 = a verify block, larger = a prefill chunk), one layer's
attention for one sequence, three ways:

  * triton   kernels/paged_attention/split_kv.py, reading the paged cache in place;
  * ref      what the engine ran before: gather the context through the slot table, dequantize,
             then SDPA with a boolean causal mask (kernels/paged_attention/ref.py);
  * sdpa     torch SDPA on K/V already contiguous in bf16 (no paging, no gather) with a
             lower-right causal mask: what a contiguous cache would cost, the kernel's bar.

Each is captured in a CUDA graph (as the engine runs it) and timed with triton.testing.do_bench,
which flushes the L2 cache between runs (a layer's KV is not in L2 when the layer runs). The slot
table is scattered (blocks of 16 in random order). "err" is max |triton - ref| / max |ref|.

    python -m bench.attention [--shapes 0.5b 1.5b 7b] [--contexts 1024 4096 16384] [--k 1 16]
                              [--kv-dtypes bf16 fp8 int8 int4]
                              [--sweep | --sweep-layout | --sweep-prefill]
"""

from __future__ import annotations

import argparse

import torch

from bench.common import bench_us, header, save_json, table

SHAPES = {"0.5b": (14, 2, 64), "1.5b": (12, 2, 128), "7b": (28, 4, 128)}  # query heads, KV heads, head dim
BLOCK = 16


def make_case(shape: str, context: int, k: int, kv_dtype: str, seed: int = 0):
    from engine.kv_cache import make_layer_kv

    H, Hkv, D = SHAPES[shape]
    g = torch.Generator(device="cuda").manual_seed(seed)
    blocks = -(-context // BLOCK)
    kv = make_layer_kv("auto" if kv_dtype == "bf16" else kv_dtype, (blocks + 1) * BLOCK, Hkv, D, torch.bfloat16, "cuda")
    order = torch.randperm(blocks + 1, device="cuda", generator=g)[:blocks]
    slot_tables = (order[:, None] * BLOCK + torch.arange(BLOCK, device="cuda")).reshape(1, -1)[:, :context]
    k_ctx = torch.randn(context, Hkv, D, device="cuda", generator=g, dtype=torch.bfloat16)
    v_ctx = torch.randn(context, Hkv, D, device="cuda", generator=g, dtype=torch.bfloat16)
    kv.write(slot_tables[0], k_ctx, v_ctx)
    q = torch.randn(k, H, D, device="cuda", generator=g, dtype=torch.bfloat16)
    q_positions = torch.arange(context - k, context, device="cuda")[None]
    return kv, slot_tables.contiguous(), q, q_positions, k_ctx, v_ctx


def variants(kv, slot_tables, q, q_positions, k_ctx, v_ctx, **kernel_args):
    from torch.nn.attention.bias import causal_lower_right

    from kernels.paged_attention import paged_attention_cache_ref
    from kernels.paged_attention.split_kv import paged_attention_triton

    T, H, D = q.shape
    context = slot_tables.shape[1]
    scale = D**-0.5
    qs = q.view(1, T, H, D).transpose(1, 2)  # [1, H, T, D]
    kc = k_ctx.view(1, context, -1, D).transpose(1, 2).contiguous()  # [1, Hkv, S, D]
    vc = v_ctx.view(1, context, -1, D).transpose(1, 2).contiguous()
    mask = causal_lower_right(T, context) if T > 1 else None

    def sdpa():
        return torch.nn.functional.scaled_dot_product_attention(qs, kc, vc, attn_mask=mask, scale=scale, enable_gqa=True)

    try:
        sdpa()
    except RuntimeError:  # no GQA with this mask in this torch: K/V expanded to every query head beforehand
        kc, vc = kc.repeat_interleave(H // kc.shape[1], 1), vc.repeat_interleave(H // vc.shape[1], 1)
    return {
        "triton": lambda: paged_attention_triton(q, kv, slot_tables, q_positions, scale, **kernel_args),
        "ref": lambda: paged_attention_cache_ref(q, kv, slot_tables, q_positions, [T], [context], scale),
        "sdpa": sdpa,
    }


def run_point(shape, context, k, kv_dtype, with_peers=True, **kernel_args):
    case = make_case(shape, context, k, kv_dtype)
    fns = variants(*case, **kernel_args)
    out = fns["triton"]()
    ref = fns["ref"]()
    err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    us = {name: bench_us(fn) for name, fn in fns.items() if with_peers or name == "triton"}
    return us, err


def sweep(args) -> None:
    """A small grid of launch parameters at a few points, to pick the defaults."""
    import itertools

    from kernels.paged_attention import split_kv

    points = [("0.5b", 4096, 16), ("7b", 4096, 16), ("0.5b", 16384, 1), ("1.5b", 1024, 16)]
    rows = []
    configs = [(bn, w, st, split_kv.MIN_KEYS_PER_SPLIT) for bn, w, st in itertools.product((32, 64, 128), (4, 8), (2, 3))]
    configs += [(64, None, 2, mk) for mk in (32, 64, 256, 512)]
    default_min_keys = split_kv.MIN_KEYS_PER_SPLIT
    for shape, ctx, k in points:
        for block_n, warps, stages, min_keys in configs:
            split_kv.MIN_KEYS_PER_SPLIT = min_keys
            got = _try_point(shape, ctx, k, block_n=block_n, num_warps=warps, num_stages=stages)
            if got is not None:
                rows.append([shape, ctx, k, block_n, warps, stages, min_keys, got[0]])
    split_kv.MIN_KEYS_PER_SPLIT = default_min_keys
    print(table(["shape", "context", "K", "block_n", "warps", "stages", "min keys/split", "triton us"], rows))


def _try_point(shape, ctx, k, **kernel_args) -> tuple[float, str] | None:
    """The kernel's µs and error at one point with these launch parameters; None for a config out of resources."""
    try:
        us, err = run_point(shape, ctx, k, "bf16", with_peers=False, **kernel_args)
    except Exception as e:  # noqa: BLE001 (an out-of-resources config: skip it)
        print(f"skip {shape} {ctx} {k} {kernel_args}: {type(e).__name__}: {e}"[:300])
        return None
    return us["triton"], f"{err:.1e}"


def sweep_layout(args) -> None:
    """How a verify block's work is cut, at the points of --shapes x --contexts x --k: rows per
    program (block_m: fewer rows, more query blocks, each reading the keys again) against splits
    of the keys (more splits, more fp32 partials to merge), every pair, then the tile, stages and
    warps varied one at a time around the best. A kernel's µs, captured alone in a graph (a
    replay's fixed cost, printed first, is in every figure)."""
    x = torch.zeros(1024, device="cuda")
    print(f"one tiny kernel, captured and replayed the same way: {bench_us(lambda: x.add_(1)):.1f} us", flush=True)
    columns = ["shape", "context", "K", "block_m", "splits", "block_n", "stages", "warps", "triton us", "err"]
    rows = []
    for shape in args.shapes:
        for ctx in args.contexts:
            for k in args.k:
                point, best = [], None
                for block_m in (16, 32, 64, 128):  # every G here fits a block of 16 rows
                    for splits in (None, 4, 8, 16, 32, 64):
                        got = _try_point(shape, ctx, k, block_m=block_m, num_splits=splits)
                        if got is not None:
                            point.append([shape, ctx, k, block_m, splits or "auto", 64, 2, "auto", *got])
                            if best is None or got[0] < best[0]:
                                best = (got[0], block_m, splits)
                if best is None:
                    continue
                _, block_m, splits = best
                for block_n, stages, warps in [(32, 2, None), (128, 2, None), (64, 1, None), (64, 3, None),
                                               (64, 2, 2), (64, 2, 4), (64, 2, 8)]:
                    got = _try_point(shape, ctx, k, block_m=block_m, num_splits=splits, block_n=block_n,
                                     num_stages=stages, num_warps=warps)
                    if got is not None:
                        point.append([shape, ctx, k, block_m, splits or "auto", block_n, stages, warps or "auto", *got])
                print(table(columns, point), flush=True)
                rows += point
    save_json("attention_layout.json", {"columns": columns, "rows": rows})


def sweep_prefill(args) -> None:
    """A prompt chunk's launch parameters at the points of --shapes x --contexts (a first chunk:
    K = the context): rows per program, key tile, warps and stages, every combination, against
    SDPA on a contiguous bf16 cache. µs per call as in the other sweeps."""
    import itertools

    columns = ["shape", "chunk", "block_m", "block_n", "warps", "stages", "triton us", "sdpa us", "err"]
    rows = []
    for shape in args.shapes:
        for ctx in args.contexts:
            case = make_case(shape, ctx, ctx, "bf16")
            sdpa = bench_us(variants(*case)["sdpa"])
            point = []
            for block_m, block_n, warps, stages in itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3)):
                got = _try_point(shape, ctx, ctx, block_m=block_m, block_n=block_n, num_warps=warps, num_stages=stages)
                if got is not None:
                    point.append([shape, ctx, block_m, block_n, warps, stages, got[0], sdpa, got[1]])
            print(table(columns, point), flush=True)
            rows += point
    save_json("attention_prefill.json", {"columns": columns, "rows": rows})


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--k", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--kv-dtypes", nargs="+", default=["bf16", "fp8", "int8", "int4"])
    ap.add_argument("--sweep", action="store_true", help="only the launch-parameter sweep")
    ap.add_argument("--sweep-layout", action="store_true", help="only the rows-per-program x splits sweep")
    ap.add_argument("--sweep-prefill", action="store_true", help="only the prompt chunks' launch-parameter sweep")
    args = ap.parse_args(argv)
    assert torch.cuda.is_available(), "a CUDA device is needed"
    if args.sweep:
        sweep(args)
        return
    if args.sweep_layout:
        sweep_layout(args)
        return
    if args.sweep_prefill:
        sweep_prefill(args)
        return

    rows, results = [], []
    for kv_dtype in args.kv_dtypes:
        for shape in args.shapes:
            for context in args.contexts:
                for k in args.k:
                    us, err = run_point(shape, context, k, kv_dtype)
                    H, Hkv, D = SHAPES[shape]
                    rows.append([kv_dtype, f"{shape} ({H}/{Hkv}/{D})", context, k, us["triton"], us["ref"], us["sdpa"],
                                 us["ref"] / us["triton"], us["sdpa"] / us["triton"], f"{err:.1e}"])
                    results.append(dict(kv_dtype=kv_dtype, shape=shape, context=context, k=k, err=err, **us))
                    print(" | ".join(str(v) for v in rows[-1]), flush=True)
    print(header("Paged attention, one layer, batch 1 (bench.attention)"))
    print(table(["KV", "shape (H/Hkv/D)", "context", "K", "triton us", "ref us", "sdpa us", "ref/triton",
                 "sdpa/triton", "err"], rows))
    save_json("attention.json", {"points": results})


if __name__ == "__main__":
    main()
