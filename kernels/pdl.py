"""Programmatic dependent launch (PDL, sm_90 and newer) for the Triton kernels of a step.

A kernel launched with PDL may be scheduled while the kernel before it in the stream is still
running, so its launch overlaps that kernel's tail; a CUDA graph keeps the launch's programmatic
edge. Every Triton kernel here calls `wait_previous(PDL)` before it touches memory another kernel
writes: griddepcontrol.wait, which blocks until the kernel before has completed and its writes are
visible, so no load or store of activations, caches or outputs moves before that kernel's end.
Some call `release_next(PDL)` (griddepcontrol.launch_dependents), which lets the next PDL kernel
be scheduled before they end (it too waits before touching memory). A kernel launched without PDL
(cuBLAS, torch's) waits for ours to complete, as always.

Off unless `set_enabled(True)` (EngineConfig.pdl, set by the runner on CUDA before any graph is
captured), and never on an older GPU or under Triton's interpreter, which lacks the instructions.
Like the kernel modules that import it, this module is imported only where a kernel or a CUDA
engine needs it: its JIT helpers take Triton's mode (interpreter or not) when first imported.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

_enabled = False


def set_enabled(on: bool) -> None:
    global _enabled
    _enabled = on


@functools.cache
def _has_pdl(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index)[0] >= 9


def pdl_options(x: torch.Tensor) -> dict:
    """The PDL arguments of a launch whose kernel starts with `wait_previous(PDL)`, for a kernel on
    x's device: the constexpr and Triton's launch option."""
    on = _enabled and x.is_cuda and _has_pdl(x.get_device())
    return {"PDL": on, "launch_pdl": on}


@triton.jit
def wait_previous(PDL: tl.constexpr):
    """With PDL, wait until the kernel before has completed and its writes are visible."""
    if PDL:
        gdc_wait()


@triton.jit
def release_next(PDL: tl.constexpr):
    """With PDL, let the next kernel be scheduled once every program has passed here (else it is
    when they end). Early in a kernel of few programs (a norm, RoPE), after the main loop in one of
    many (the attention: the next's waiting programs would take the SMs its own still need)."""
    if PDL:
        gdc_launch_dependents()
