"""Kernels: one folder per op, a plain-PyTorch reference (`ref.py`, the spec) beside each fast version."""
