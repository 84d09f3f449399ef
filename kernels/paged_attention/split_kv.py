"""Split-KV paged attention in Triton: verify blocks, decode and prefill chunks read straight from the cache.

One program takes one (sequence, query block, KV head, split). Its rows are `BLOCK_M // G`
consecutive queries times the G query heads that share the KV head (GQA), so each K/V tile is read
once per group. Its keys are the ones the block can see (positions up to its last query; with a
sliding window, from its first query's window start), read tile by tile through the slot table,
with the causal/window mask applied inside. Those keys are divided among `num_splits` programs so
that a few queries (K = 1..16 at batch 1) still fill the GPU; each writes its normalized partial
output and its log-sum-exp, and `_merge` combines the splits. With one split the first kernel
writes the output itself.

Cache formats (engine/kv_cache.py, `kv.format`): `plain` (bf16/fp16/fp32), `fp8` and `int8` (one
fp32 scale per token per head), `int4` (two channels a byte; keys with an fp16 scale and minimum
per channel per KV block, values per 32 channels of a token; engine/kv_int4.py). The head dim is processed as two halves: channels [0, D/2) and [D/2, D) for the formats
with a byte or more per channel, even and odd channels for int4 (the low and high nibbles of byte
j are channels 2j and 2j+1), so one code path reads every format. fp8/int8 keys are scaled after
the dot product and values through the softmax weights (int8 and e4m3 values are exact in bf16).
int4 keeps the block holding each query's own position in full precision as well (its window):
for keys in a query's own block the scores and the values come from the window copy instead.

Shape-static and sync-free: the grid depends only on tensor shapes, so CUDA graphs capture it. A
sequence's real context is read on the device from `q_positions`, and each program divides the
keys its block can see evenly among the splits, so a graph captured for a wide slot table spends
no work on the padding past a short context.

Batch-invariant (`invariant`, EDITAPPLY_BATCH_INVARIANT): a query's output must not depend on the
queries beside it or on the slot table's width, so every shape it meets is fixed, as in ref.py's
`paged_attention_rows`: query blocks of one size, splits of KEY_CHUNK keys at fixed positions
(split s reads keys [s * KEY_CHUNK, (s + 1) * KEY_CHUNK), whatever the block's last position), and
the splits merged one after another in split order. Keys past a query's position, and splits past
it, add exact zeros.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels.paged_attention.ref import KEY_CHUNK
from kernels.pdl import pdl_options, release_next, wait_previous
from kernels.tiles import dot_options

FORMATS = {"plain": 0, "fp8": 1, "int8": 2, "int4": 3}
INT4_GROUP = 32
MAX_SPLITS = 128
# Fewest keys worth a split of their own (64 beat 32, 128, 256, 512 on the H200: bench.attention --sweep).
MIN_KEYS_PER_SPLIT = 64
# Rows of a query block where a few blocks fill a quarter of the GPU or less (a verify block at
# batch 1): two programs of 64 rows share each split's keys where one of 128 held them all (H100,
# K=16 at 4k: 0.5B 15.4 -> 13.7 µs, 1.5B 17.5 -> 16.1; bench.attention --sweep-layout).
FEW_PROGRAMS_ROWS = 64


@triton.jit
def _load_tile(ptr, scale_ptr, slot, h, half, kmask, stride_s, stride_h, stride_ss, stride_sh,
               D: tl.constexpr, FORMAT: tl.constexpr, DTYPE: tl.constexpr):
    """A K or V tile as its two halves, [BLOCK_N, D/2] each in DTYPE (fp8/int8 values unscaled)."""
    rows = ptr + slot[:, None] * stride_s + h * stride_h
    if FORMAT == 3:
        # byte j holds channels 2j (low nibble) and 2j+1 (high), both in group j // 16, whose
        # parameters are [scale, minimum]: one load of the bytes and the parameters for both halves
        raw = tl.load(rows + half[None, :], mask=kmask[:, None], other=0)
        par = scale_ptr + slot[:, None] * stride_ss + h * stride_sh + (half[None, :] // 16) * 2
        sc = tl.load(par, mask=kmask[:, None], other=0).to(tl.float32)
        mn = tl.load(par + 1, mask=kmask[:, None], other=0).to(tl.float32)
        x0 = ((raw & 15).to(tl.float32) * sc + mn).to(DTYPE)
        x1 = ((raw >> 4).to(tl.float32) * sc + mn).to(DTYPE)
    else:
        raw0 = tl.load(rows + half[None, :], mask=kmask[:, None], other=0)
        raw1 = tl.load(rows + D // 2 + half[None, :], mask=kmask[:, None], other=0)
        if FORMAT == 0:
            x0, x1 = raw0.to(DTYPE), raw1.to(DTYPE)
        elif FORMAT == 1:
            x0 = raw0.to(tl.float8e4nv, bitcast=True).to(tl.float32).to(DTYPE)
            x1 = raw1.to(tl.float8e4nv, bitcast=True).to(tl.float32).to(DTYPE)
        else:
            x0, x1 = raw0.to(tl.float32).to(DTYPE), raw1.to(tl.float32).to(DTYPE)
    return x0, x1


@triton.jit
def _load_int4_keys(ptr, par_ptr, slot, h, half, kmask, stride_s, stride_h, stride_pb, stride_ph,
                    BS: tl.constexpr, DTYPE: tl.constexpr):
    """int4 keys as their even / odd channel halves: byte j holds channels 2j and 2j+1, each with
    its block's [scale, minimum] (engine/kv_int4.py: k_scale [blocks, H, D, 2])."""
    raw = tl.load(ptr + slot[:, None] * stride_s + h * stride_h + half[None, :], mask=kmask[:, None], other=0)
    par = par_ptr + (slot // BS)[:, None] * stride_pb + h * stride_ph + 4 * half[None, :]
    sc0 = tl.load(par, mask=kmask[:, None], other=0).to(tl.float32)
    mn0 = tl.load(par + 1, mask=kmask[:, None], other=0).to(tl.float32)
    sc1 = tl.load(par + 2, mask=kmask[:, None], other=0).to(tl.float32)
    mn1 = tl.load(par + 3, mask=kmask[:, None], other=0).to(tl.float32)
    return ((raw & 15).to(tl.float32) * sc0 + mn0).to(DTYPE), ((raw >> 4).to(tl.float32) * sc1 + mn1).to(DTYPE)


# Integer arguments that vary with a step's lengths are not specialized on (Triton compiles a
# variant per "== 1 / divisible by 16 / other" pattern of its int arguments): an eager prefill
# of a new length otherwise compiled a new variant, ~1 s, in the middle of a request.
@triton.jit(do_not_specialize=["stride_tb", "stride_pb", "stride_ps", "stride_pt", "stride_ls", "stride_lt",
                               "uniform_q_len", "num_q_blocks", "num_splits", "window"])
def _attn_split(
    Q, K, V, KS, VS, KW, VW, WOF, SLOTS, QPOS, QSTART, O, OPART, LSE,
    stride_qt, stride_qh, stride_ks, stride_kh, stride_ss, stride_sh, stride_kbs, stride_kbh, stride_ws, stride_wh,
    stride_tb, stride_pb,
    stride_ot, stride_oh, stride_ps, stride_pt, stride_ph, stride_ls, stride_lt,
    uniform_q_len, num_q_blocks, num_splits, scale_log2, window,
    G: tl.constexpr, D: tl.constexpr, BS: tl.constexpr, FORMAT: tl.constexpr, VARLEN: tl.constexpr, HAS_WINDOW: tl.constexpr,
    SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
    DOT_FP32: tl.constexpr, FIXED_SPLIT: tl.constexpr, PDL: tl.constexpr,
):
    wait_previous(PDL)
    b = tl.program_id(0) // num_q_blocks
    qblock = tl.program_id(0) % num_q_blocks
    h = tl.program_id(1)
    split = tl.program_id(2)
    QPB: tl.constexpr = BLOCK_M // G  # queries per block
    if VARLEN:
        q_start = tl.load(QSTART + b)
        q_len = tl.load(QSTART + b + 1) - q_start
    else:
        q_start = b * uniform_q_len
        q_len = uniform_q_len
    if qblock * QPB >= q_len:
        return

    # row r: query qblock * QPB + r // G of the sequence, head h * G + r % G
    rows = tl.arange(0, BLOCK_M)
    qi = qblock * QPB + rows // G
    head = h * G + rows % G
    valid = (rows < QPB * G) & (qi < q_len)
    pos = tl.load(QPOS + b * stride_pb + qi, mask=valid, other=0)  # [BLOCK_M]
    hi = tl.max(tl.where(valid, pos, -1), axis=0) + 1  # the block sees keys [lo, hi)
    if HAS_WINDOW:
        lo = tl.maximum(tl.min(tl.where(valid, pos, hi), axis=0) - window + 1, 0)
    else:
        lo = 0
    if FIXED_SPLIT:  # keys [split * FIXED_SPLIT, ...) at fixed positions; tiles wholly before lo skipped
        start = tl.maximum(split * FIXED_SPLIT, (lo // BLOCK_N) * BLOCK_N)
        end = tl.minimum((split + 1) * FIXED_SPLIT, hi)
    else:
        per_split = tl.cdiv(tl.cdiv(hi - lo, num_splits), BLOCK_N) * BLOCK_N
        start = lo + split * per_split
        end = tl.minimum(start + per_split, hi)

    half = tl.arange(0, D // 2)
    if FORMAT == 3:
        ch0, ch1 = 2 * half, 2 * half + 1  # channels of the low / high nibbles
    else:
        ch0, ch1 = half, half + D // 2
    tok = q_start + qi
    q_rows = Q + tok[:, None] * stride_qt + head[:, None] * stride_qh
    q0 = tl.load(q_rows + ch0[None, :], mask=valid[:, None], other=0.0)  # [BLOCK_M, D/2]
    q1 = tl.load(q_rows + ch1[None, :], mask=valid[:, None], other=0.0)
    DTYPE: tl.constexpr = Q.dtype.element_ty
    # The operands' dtype in tl.dot: DTYPE, or fp32 (exact for bf16) where the interpreter's bf16 dot is wrong.
    DOT: tl.constexpr = tl.float32 if DOT_FP32 else DTYPE
    q0, q1 = q0.to(DOT), q1.to(DOT)

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc0 = tl.zeros([BLOCK_M, D // 2], tl.float32)
    acc1 = tl.zeros([BLOCK_M, D // 2], tl.float32)
    # int4: the first key of the earliest own block among the block's queries (window reads start there)
    own_lo = (tl.min(tl.where(valid, pos, hi), axis=0) // BS) * BS
    for n in range(start, end, BLOCK_N):
        kpos = n + tl.arange(0, BLOCK_N)
        kmask = kpos < end
        slot = tl.load(SLOTS + b * stride_tb + kpos, mask=kmask, other=0)
        if FORMAT == 3:
            k0, k1 = _load_int4_keys(K, KS, slot, h, half, kmask, stride_ks, stride_kh, stride_kbs, stride_kbh, BS, DTYPE)
        else:
            k0, k1 = _load_tile(K, KS, slot, h, half, kmask, stride_ks, stride_kh, stride_ss, stride_sh, D, FORMAT, DTYPE)
        s = tl.dot(q0, tl.trans(k0.to(DOT)), input_precision=PRECISION)
        s = tl.dot(q1, tl.trans(k1.to(DOT)), s, input_precision=PRECISION)  # [BLOCK_M, BLOCK_N]
        if FORMAT == 3:
            # keys in a query's own block: scores from the full-precision window copy
            entry = tl.load(WOF + slot // BS, mask=kmask & (kpos >= own_lo), other=-1)
            held = entry >= 0
            wrows = KW + tl.where(held, entry * BS + slot % BS, 0)[:, None] * stride_ws + h * stride_wh
            kf0 = tl.load(wrows + ch0[None, :], mask=held[:, None], other=0.0).to(DOT)
            kf1 = tl.load(wrows + ch1[None, :], mask=held[:, None], other=0.0).to(DOT)
            sf = tl.dot(q0, tl.trans(kf0), input_precision=PRECISION)
            sf = tl.dot(q1, tl.trans(kf1), sf, input_precision=PRECISION)
            own = held[None, :] & ((kpos // BS)[None, :] == (pos // BS)[:, None])
            s = tl.where(own, sf, s)
        if FORMAT == 1 or FORMAT == 2:
            k_scale = tl.load(KS + slot * stride_ss + h * stride_sh, mask=kmask, other=0.0)
            s = s * k_scale[None, :]
        s = s * scale_log2
        visible = kmask[None, :] & (kpos[None, :] <= pos[:, None])
        if HAS_WINDOW:
            visible = visible & (kpos[None, :] > pos[:, None] - window)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that see nothing yet
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m - m_safe)
        l = l * alpha + tl.sum(p, axis=1)
        m = m_new
        v0, v1 = _load_tile(V, VS, slot, h, half, kmask, stride_ks, stride_kh, stride_ss, stride_sh, D, FORMAT, DTYPE)
        if FORMAT == 1 or FORMAT == 2:
            v_scale = tl.load(VS + slot * stride_ss + h * stride_sh, mask=kmask, other=0.0)
            p = p * v_scale[None, :]
        acc0 = acc0 * alpha[:, None]
        acc1 = acc1 * alpha[:, None]
        if FORMAT == 3:
            vrows = VW + tl.where(held, entry * BS + slot % BS, 0)[:, None] * stride_ws + h * stride_wh
            vf0 = tl.load(vrows + ch0[None, :], mask=held[:, None], other=0.0).to(DOT)
            vf1 = tl.load(vrows + ch1[None, :], mask=held[:, None], other=0.0).to(DOT)
            pf = tl.where(own, p, 0.0).to(DTYPE).to(DOT)
            acc0 = tl.dot(pf, vf0, acc0, input_precision=PRECISION)
            acc1 = tl.dot(pf, vf1, acc1, input_precision=PRECISION)
            p = tl.where(own, 0.0, p)
        p = p.to(DTYPE).to(DOT)
        acc0 = tl.dot(p, v0.to(DOT), acc0, input_precision=PRECISION)
        acc1 = tl.dot(p, v1.to(DOT), acc1, input_precision=PRECISION)

    release_next(PDL)
    inv = 1.0 / tl.where(l > 0, l, 1.0)
    acc0 = acc0 * inv[:, None]
    acc1 = acc1 * inv[:, None]
    if SPLIT:
        part = OPART + split * stride_ps + tok[:, None] * stride_pt + head[:, None] * stride_ph
        tl.store(part + ch0[None, :], acc0, mask=valid[:, None])
        tl.store(part + ch1[None, :], acc1, mask=valid[:, None])
        lse = tl.where(l > 0, m + tl.log2(tl.where(l > 0, l, 1.0)), float("-inf"))  # log2 domain
        tl.store(LSE + split * stride_ls + tok * stride_lt + head, lse, mask=valid)
    else:
        out = O + tok[:, None] * stride_ot + head[:, None] * stride_oh
        tl.store(out + ch0[None, :], acc0.to(O.dtype.element_ty), mask=valid[:, None])
        tl.store(out + ch1[None, :], acc1.to(O.dtype.element_ty), mask=valid[:, None])


@triton.jit(do_not_specialize=["num_splits", "stride_ps", "stride_pt", "stride_ls", "stride_lt"])
def _merge(OPART, LSE, O, num_splits, stride_ps, stride_pt, stride_ph, stride_ls, stride_lt, stride_ot, stride_oh,
           D: tl.constexpr, SPLITS: tl.constexpr, ORDERED: tl.constexpr, PDL: tl.constexpr):
    """out[t, h] = sum over splits of partial * 2^(lse - max lse), renormalized. ORDERED: the splits
    added one after another in split order, so empty splits past the query's keys change no bit."""
    wait_previous(PDL)
    t = tl.program_id(0)
    h = tl.program_id(1)
    d = tl.arange(0, D)
    if ORDERED:
        top = tl.full([], float("-inf"), tl.float32)
        for i in range(num_splits):
            top = tl.maximum(top, tl.load(LSE + i * stride_ls + t * stride_lt + h))
        acc = tl.zeros([D], tl.float32)
        total = tl.full([], 0.0, tl.float32)
        for i in range(num_splits):
            w = tl.exp2(tl.load(LSE + i * stride_ls + t * stride_lt + h) - top)  # empty splits weigh 0
            acc += tl.load(OPART + i * stride_ps + t * stride_pt + h * stride_ph + d) * w
            total += w
        out = acc / total
    else:
        s = tl.arange(0, SPLITS)
        lse = tl.load(LSE + s * stride_ls + t * stride_lt + h, mask=s < num_splits, other=float("-inf"))
        w = tl.exp2(lse - tl.max(lse, axis=0))  # [SPLITS]; empty splits weigh 0
        part = tl.load(OPART + s[:, None] * stride_ps + t * stride_pt + h * stride_ph + d[None, :],
                       mask=(s < num_splits)[:, None], other=0.0)
        out = tl.sum(part * w[:, None], axis=0) / tl.sum(w, axis=0)
    tl.store(O + t * stride_ot + h * stride_oh + d, out.to(O.dtype.element_ty))


@functools.cache
def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 8  # the interpreter: a few splits, so that tests cover the merge
    return torch.cuda.get_device_properties(device).multi_processor_count


def choose_splits(programs: int, width: int, device: torch.device) -> int:
    """Splits per (sequence, query block, KV head) so that about two waves of programs run, each
    with at least MIN_KEYS_PER_SPLIT keys of the slot table's `width`; a power of two, since
    `_merge` reads a tile of the next power of two (33 splits cost it 64's: the 7B's verify block
    at 4k, 22.5 against 19.9 µs with 32 on the H100)."""
    sms = _sm_count(device)
    if programs >= sms:
        return 1
    splits = max(1, min(triton.cdiv(2 * sms, programs), triton.cdiv(width, MIN_KEYS_PER_SPLIT), MAX_SPLITS))
    return 1 << (splits.bit_length() - 1)


def widest_block(D: int) -> int:
    """The most rows a program holds: 128, or 64 past a head dim of 128 (registers)."""
    return 128 if D <= 128 else 64


def choose_block_m(B: int, max_q: int, G: int, Hkv: int, D: int, device: torch.device) -> int:
    """Rows of a query block (queries x the G heads of a KV head): the whole block of queries, 16
    to `widest_block`; at most FEW_PROGRAMS_ROWS where the blocks would number a quarter of the
    SMs or fewer (a verify block at batch 1)."""
    block_m = min(widest_block(D), max(16, triton.next_power_of_2(max_q * G)))
    if B * triton.cdiv(max_q, max(1, block_m // G)) * Hkv <= _sm_count(device) // 4:
        block_m = min(block_m, FEW_PROGRAMS_ROWS)
    return block_m


def paged_attention_triton(
    q: torch.Tensor,  # [T, H, D]: the step's queries, sequence after sequence
    kv,  # the layer's cache: .k, .v [slots, Hkv, D] (int4: D/2 bytes), .format, .k_scale, .v_scale (int4: and its window)
    slot_tables: torch.Tensor,  # [B, S] cache slot of each context position
    q_positions: torch.Tensor,  # [B, Tq_max] absolute position of each query
    scale: float,
    sliding_window: int | None = None,
    query_starts: torch.Tensor | None = None,  # [B+1] int32 first row of each sequence; None: T // B rows each
    num_splits: int | None = None,  # None: choose_splits
    block_n: int = 64,
    block_m: int | None = None,  # None: rows for the whole block of queries, 16..128
    num_warps: int | None = None,
    num_stages: int = 2,
    invariant: bool = False,  # each query's output independent of the others and of S (see above)
) -> torch.Tensor:  # [T, H, D]
    T, H, D = q.shape
    B, S = slot_tables.shape
    fmt = FORMATS[kv.format]
    k_cache, v_cache = kv.k, kv.v
    Hkv = k_cache.shape[1]
    G = H // Hkv
    assert H == G * Hkv, f"{H} query heads do not share {Hkv} KV heads evenly"
    assert D % 32 == 0 and D & (D - 1) == 0, f"head dim {D} must be a power of two >= 32"
    assert k_cache.shape == v_cache.shape and k_cache.stride() == v_cache.stride()
    assert k_cache.shape[2] == (D // 2 if fmt == 3 else D) and k_cache.stride(2) == 1
    assert q.stride(2) == 1 and slot_tables.stride(1) == 1 and q_positions.stride(1) == 1
    if fmt == 0:
        k_scale = v_scale = k_cache  # unused
    else:
        k_scale, v_scale = kv.k_scale, kv.v_scale
        assert fmt == 3 or k_scale.stride() == v_scale.stride()
    block_size = 16  # unused but by int4
    k_window = v_window = window_of = k_cache  # unused but by int4
    if fmt == 3:
        block_size, k_window, v_window, window_of = kv.block_size, kv.k_window, kv.v_window, kv.window_of
        assert k_scale.shape == (k_cache.shape[0] // block_size, Hkv, D, 2) and k_scale.stride()[2:] == (2, 1)
        assert v_scale.shape[2:] == (D // INT4_GROUP, 2) and v_scale.stride()[2:] == (2, 1)
        assert k_window.shape[1:] == (Hkv, D) and k_window.stride() == v_window.stride() and k_window.stride(2) == 1
    if query_starts is None:
        assert T % B == 0, f"{T} query rows for {B} sequences: pass query_starts"
        q_len, max_q = T // B, T // B
    else:
        assert query_starts.shape == (B + 1,) and query_starts.dtype == torch.int32
        q_len, max_q = 0, q_positions.shape[1]

    if invariant:
        block_m, num_splits = widest_block(D), triton.cdiv(S, KEY_CHUNK)
    elif block_m is None:
        block_m = choose_block_m(B, max_q, G, Hkv, D, q.device)
    block_m = max(block_m, triton.next_power_of_2(G))
    num_q_blocks = triton.cdiv(max_q, block_m // G)
    if not invariant:
        if num_splits is None:
            num_splits = choose_splits(B * num_q_blocks * Hkv, S, q.device)
        num_splits = max(1, min(num_splits, MAX_SPLITS))
    if num_warps is None:
        num_warps = 8 if block_m * D >= 128 * 128 else 4

    out = torch.empty_like(q)
    split = num_splits > 1 or invariant
    if split:
        o_part = torch.empty(num_splits, T, H, D, dtype=torch.float32, device=q.device)
        lse = torch.empty(num_splits, T, H, dtype=torch.float32, device=q.device)
    else:
        o_part = lse = out  # unused
    log2e = 1.4426950408889634
    _attn_split[(B * num_q_blocks, Hkv, num_splits)](
        Q=q, K=k_cache, V=v_cache, KS=k_scale, VS=v_scale, KW=k_window, VW=v_window, WOF=window_of,
        SLOTS=slot_tables, QPOS=q_positions,
        QSTART=query_starts if query_starts is not None else slot_tables, O=out, OPART=o_part, LSE=lse,
        stride_qt=q.stride(0), stride_qh=q.stride(1), stride_ks=k_cache.stride(0), stride_kh=k_cache.stride(1),
        stride_ss=v_scale.stride(0), stride_sh=v_scale.stride(1), stride_kbs=k_scale.stride(0),
        stride_kbh=k_scale.stride(1), stride_ws=k_window.stride(0), stride_wh=k_window.stride(1),
        stride_tb=slot_tables.stride(0),
        stride_pb=q_positions.stride(0), stride_ot=out.stride(0), stride_oh=out.stride(1),
        stride_ps=o_part.stride(0) if split else 0, stride_pt=o_part.stride(1) if split else 0,
        stride_ph=o_part.stride(2) if split else 0, stride_ls=lse.stride(0) if split else 0,
        stride_lt=lse.stride(1) if split else 0,
        uniform_q_len=q_len, num_q_blocks=num_q_blocks, num_splits=num_splits, scale_log2=scale * log2e,
        window=sliding_window or 0,
        G=G, D=D, BS=block_size, FORMAT=fmt, VARLEN=query_starts is not None, HAS_WINDOW=sliding_window is not None,
        SPLIT=split, BLOCK_M=block_m, BLOCK_N=block_n,
        **dot_options(q), **pdl_options(q), FIXED_SPLIT=KEY_CHUNK if invariant else 0,
        num_warps=num_warps, num_stages=num_stages,
    )
    if split:
        _merge[(T, H)](
            OPART=o_part, LSE=lse, O=out, num_splits=num_splits,
            stride_ps=o_part.stride(0), stride_pt=o_part.stride(1), stride_ph=o_part.stride(2),
            stride_ls=lse.stride(0), stride_lt=lse.stride(1), stride_ot=out.stride(0), stride_oh=out.stride(1),
            D=D, SPLITS=triton.next_power_of_2(num_splits), ORDERED=invariant, **pdl_options(q),
        )
    return out
