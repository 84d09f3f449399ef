"""Weights asked of the L2 cache before the kernels that read them (sm_90 and newer).

A 16-row verify step of a small model reads every weight once, in kernels of a few µs each;
between them, and while the attention and the norms run, memory idles (the 0.5B's step is ~4x its
weight-read floor, bench/RESULTS.md). Weights do not depend on the activations, so a kernel on a
side stream can ask L2 for a layer's weights before its projections run, and they then find them
there. `cp.async.bulk.prefetch.L2` is a hint: it brings bytes into L2, nothing waits on it,
and no result changes. The megakernels of Hazy Research ("Look Ma, no bubbles") and Mirage stream
weights the same way across the boundaries of their fused operations.

`WeightPrefetch` plans what each layer asks for, once its q|k|v projection has run: its other
weights (o, gate|up, down), then the next layer's q|k|v, at most a share of L2. Asked then, the
lines a prefetch evicts should be ones read already: L2 evicts the lines it has not used lately
first (LRU-like; NVIDIA does not document the policy), and the next layer's q|k|v, fetched but not
yet read, is read before that layer asks for more (were a layer to ask as it starts, that q|k|v
would be its least recently used line). The layer's attention forks the side stream
(`Attention.after_qkv`), `CausalLM.forward` joins it at the end; a CUDA graph captures the forks
as branches beside the layers' kernels.
EngineConfig.prefetch_weights; bench.step_time --prefetch times it. Triton's interpreter cannot
run inline PTX: tests compile the kernel for sm_90 (tests/kernels/test_l2_prefetch.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

SLOTS = 4  # tensors one launch asks for
BUDGET_OF_L2 = 0.6  # what one layer asks for, at most, as a share of the L2 cache


@triton.jit
def prefetch_bytes(base, nbytes, pid, programs, THREADS: tl.constexpr):
    """Ask L2 for bytes [0, nbytes) from `base` (16-byte aligned), this program's share: each of
    its threads one bulk prefetch of a piece (a multiple of 16 bytes; a tail under 16 is left)."""
    per = tl.cdiv(tl.cdiv(nbytes, programs * THREADS), 16) * 16
    off = (pid * THREADS + tl.arange(0, THREADS)).to(tl.int64) * per
    size = (tl.minimum(tl.maximum(nbytes - off, 0), per) // 16 * 16).to(tl.int32)
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.gt.s32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [base.to(tl.pointer_type(tl.int8)) + off, size], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _prefetch_kernel(p0, n0, p1, n1, p2, n2, p3, n3, THREADS: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    prefetch_bytes(p0, n0, pid, programs, THREADS)
    prefetch_bytes(p1, n1, pid, programs, THREADS)
    prefetch_bytes(p2, n2, pid, programs, THREADS)
    prefetch_bytes(p3, n3, pid, programs, THREADS)


def prefetch(pieces: list[tuple[torch.Tensor, int]], programs: int) -> None:
    """Ask L2 for the first `nbytes` of each (tensor, nbytes), up to SLOTS, on the current stream."""
    assert 0 < len(pieces) <= SLOTS and all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t, _ in pieces)
    padded = pieces + [(pieces[0][0], 0)] * (SLOTS - len(pieces))
    _prefetch_kernel[(programs,)](*(a for t, n in padded for a in (t, n)), THREADS=128, num_warps=4)


def plan(layers: list[list[torch.Tensor]], budget: int) -> list[list[tuple[torch.Tensor, int]]]:
    """What each layer asks for, given every layer's weights in the order it reads them ([q|k|v,
    o, gate|up, down]): its own after the first, then the next layer's first, in that order up to
    `budget` bytes in all (the last tensor it reaches cut short)."""
    out = []
    for i, weights in enumerate(layers):
        wanted = weights[1:] + layers[i + 1][:1] if i + 1 < len(layers) else weights[1:]
        pieces, left = [], budget
        for w in wanted:
            n = min(w.numel() * w.element_size(), left)
            if n >= 16:
                pieces.append((w, n))
            left -= n
        out.append(pieces)
    return out


class WeightPrefetch:
    """A model's layer weights asked of L2 ahead, on a stream of its own: `fork(i)` once layer i's
    q|k|v projection has run, `join()` after the last layer (module docstring)."""

    def __init__(self, layers: list[list[torch.Tensor]], device: torch.device):
        props = torch.cuda.get_device_properties(device)
        self.plan = plan(layers, int(props.L2_cache_size * BUDGET_OF_L2))
        self.programs = props.multi_processor_count
        self.stream = torch.cuda.Stream(device)

    def fork(self, i: int) -> None:
        if not self.plan[i]:
            return
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            for at in range(0, len(self.plan[i]), SLOTS):
                prefetch(self.plan[i][at : at + SLOTS], self.programs)

    def join(self) -> None:
        torch.cuda.current_stream().wait_stream(self.stream)


def available(device: torch.device) -> bool:
    """The bulk L2 prefetch needs sm_90 or newer."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9
