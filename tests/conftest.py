"""Shared pytest setup: GPU tests skip (visibly) on machines without CUDA; on those machines
Triton is imported under its interpreter first.

Triton's own ``@triton.jit`` helpers (``tl.zeros`` and the rest of triton.language's jitted
functions) are decorated when Triton is imported, as interpreted or compiled functions for
good. Imported first by a test that only plans a Triton call (no TRITON_INTERPRET), they stay
compiled, and every later interpreted kernel fails on them ("Cannot call @triton.jit'd outside
of the scope of a kernel"): tests/test_splits.py before tests/test_fuzz.py did (2026-12-03).
Our kernels are re-decorated per test (`helpers.interpreted_triton_fwd`); Triton's are not.
"""

import importlib.util

import pytest
import torch

from helpers import triton_interpret_env

if not torch.cuda.is_available() and importlib.util.find_spec("triton") is not None:
    with triton_interpret_env():
        import triton.language  # noqa: F401


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
