"""bench.persistent_probe's kernel in Triton's interpreter: one program, so its grid barriers
pass at once (the interpreter runs programs one after another; on a GPU one runs on every SM,
device job `persistent_probe`). fp32 weights: the interpreter's bf16 dot is wrong. The L2
prefetch is inline PTX, which the interpreter cannot run: it is compiled for sm_90 here."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import persistent_probe as probe


@pytest.mark.parametrize("variant", [v for v in probe.VARIANTS if not v.prefetch], ids=str)
def test_one_program_computes_every_layers_projections(variant):
    dims = [(256, 128), (128, 128), (512, 128), (128, 256)]  # hidden 128: q|k|v, o, gate|up, down
    x, weights, bufs, counter = probe.make(2, dims, 16, "cpu", torch.float32)
    out = probe.persistent(x, weights, bufs, counter, programs=1, variant=variant)
    ref = probe.reference(x, weights)
    assert out.shape == ref.shape == (16, 128)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert counter.item() == 2 * 4  # one arrival a projection


def test_no_work_leaves_the_output_zero():
    dims = [(128, 128), (128, 128), (256, 128), (128, 128)]
    x, weights, bufs, counter = probe.make(1, dims, 16, "cpu", torch.float32)
    assert not probe.persistent(x, weights, bufs, counter, programs=1, work=False).any()


def test_the_prefetch_compiles_to_l2_bulk_prefetches_on_sm90():
    """The hint has no result anything waits on: it must survive the compiler, and only when asked.
    Compiled for sm_90 (Triton's ptxas, no GPU) in a process of its own: this one interprets."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}

    def ptx(prefetch):
        code = f"from bench.persistent_probe import Variant, ptx; print(ptx(Variant(32, 128, prefetch={prefetch})))"
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parents[2]).stdout

    assert "cp.async.bulk.prefetch.L2.global" in ptx(True)
    assert "ld.global" in (plain := ptx(False)) and "cp.async.bulk.prefetch" not in plain
