"""Batch-invariant matmul on CUDA: every row of x @ w.T computed the same whatever the row count.

cuBLAS picks its kernel (tile sizes, split-K) by the problem's shape, so a row's sums differ in the
last bit between a 1-row decode step, a 16-row verify block and a batch of them; in bf16 those
differences flip greedy tokens at near-ties, and speculation then writes another text than plain
decoding. `linear_fixed_tiles` (fixed_tiles.py) runs one tile shape for every row count: each
output's sum runs over K in the same chunks, in the same order, on the same instruction, so a row's
result depends on that row alone. The CPU's form of the same rule is models/layers.py
`rows_matmul` (oneDNN); the switch is EDITAPPLY_BATCH_INVARIANT (CausalLM.set_batch_invariant).
"""
