"""bench.persistent_probe's kernel in Triton's interpreter: one program, so its grid barriers
pass at once (the interpreter runs programs one after another; on a GPU one runs on every SM,
device job `persistent_probe`). fp32 weights: the interpreter's bf16 dot is wrong."""

import torch

from bench import persistent_probe as probe


def test_one_program_computes_every_layers_projections():
    dims = [(192, 128), (128, 128), (512, 128), (128, 256)]  # hidden 128: q|k|v, o, gate|up, down
    x, weights, bufs, counter = probe.make(2, dims, 16, "cpu", torch.float32)
    out = probe.persistent(x, weights, bufs, counter, programs=1)
    ref = probe.reference(x, weights)
    assert out.shape == ref.shape == (16, 128)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    assert counter.item() == 2 * 4  # one arrival a projection


def test_no_work_leaves_the_output_zero():
    dims = [(128, 128), (128, 128), (256, 128), (128, 128)]
    x, weights, bufs, counter = probe.make(1, dims, 16, "cpu", torch.float32)
    assert not probe.persistent(x, weights, bufs, counter, programs=1, work=False).any()
