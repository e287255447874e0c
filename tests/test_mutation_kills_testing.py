"""Pinned behaviours of refimpl.testing that a sampled mutation run (``tools/mutate.py``, seed 2026)
found no fast test holding: each test names the mutant it was seen to fail on."""

from __future__ import annotations

import numpy as np
import torch

from refimpl.testing._arrays import ArrayBridge


def test_an_integer_tensor_is_read_exactly_not_through_float32() -> None:
    # 2**24 + 1 has no float32: read through float32 it becomes 2**24 (mutant: the dtype test of
    # to_numpy negated, which sent integer tensors to the float32 branch meant for bfloat16)
    got = ArrayBridge.to_numpy(torch.tensor([2**24 + 1, -(2**40) - 3], dtype=torch.int64))
    assert got.dtype == np.float64
    assert got.tolist() == [2.0**24 + 1, -(2.0**40) - 3]
    # and the low-precision floats are widened exactly: bfloat16's 1 + 2**-7 is kept
    half = ArrayBridge.to_numpy(torch.tensor([1 + 2**-7], dtype=torch.bfloat16))
    assert half.tolist() == [1 + 2**-7]
