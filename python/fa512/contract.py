"""The op's fixed limits: what every kernel of fa512 accepts, whatever plans it.

Leaf module (torch only): validation, planning, the backends and the tools read these names
from here so that each limit is written once.
"""

from __future__ import annotations

import math

import torch

HEAD_DIM = 512
# Kernels a call may request; "auto" follows the dispatch table (`fa512.planning.dispatch`).
KERNEL_NAMES = ("auto", "fp8_mma", "mma16", "triton", "reference")
# The split-KV workspace is sized for at most this many splits (`fa512.planning.splits`).
MAX_SPLITS = 32
# float32 q and K/V are served by the reference kernel only (`REFERENCE_ONLY_DTYPES`): it is how a
# float32 model (transformers on CPU, fa512.integrations.transformers) runs through the op; the GPU
# kernels refuse it with that reason.
Q_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
KV_DTYPES = (torch.float8_e4m3fn, torch.bfloat16, torch.float16, torch.float32)
REFERENCE_ONLY_DTYPES = (torch.float32,)
DEFAULT_SOFTMAX_SCALE = 1.0 / math.sqrt(HEAD_DIM)

__all__ = ["DEFAULT_SOFTMAX_SCALE", "HEAD_DIM", "KERNEL_NAMES", "KV_DTYPES", "MAX_SPLITS", "Q_DTYPES", "REFERENCE_ONLY_DTYPES"]
