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
# Numerics a call may request (`fa512.attention`'s ``precision``); "auto" is resolved per call
# shape by `fa512.planning.precision`.
PRECISIONS = ("auto", "fast", "accurate")
# Most splits one call may ask for (`num_splits`) and the SM90 planner may pick: the SM90 combine
# merges up to 256 (`cute_kernels.combine`), enough to give a 1-kv-head sequence all 132 SMs.
# Backends may plan fewer (`Backend.max_splits`); the split workspace is sized per call.
MAX_SPLITS = 256
# CUDA's limit on grid y and z: the forwards put (tile heads x splits) on y (`fa512.planning.dispatch`).
MAX_GRID_YZ = 65535
# float32 q and K/V are served by the reference kernel only (`REFERENCE_ONLY_DTYPES`): it is how a
# float32 model (transformers on CPU, fa512.integrations.transformers) runs through the op; the GPU
# kernels refuse it with that reason.
Q_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
KV_DTYPES = (torch.float8_e4m3fn, torch.bfloat16, torch.float16, torch.float32)
REFERENCE_ONLY_DTYPES = (torch.float32,)
DEFAULT_SOFTMAX_SCALE = 1.0 / math.sqrt(HEAD_DIM)

__all__ = ["DEFAULT_SOFTMAX_SCALE", "HEAD_DIM", "KERNEL_NAMES", "KV_DTYPES", "MAX_GRID_YZ", "MAX_SPLITS", "PRECISIONS", "Q_DTYPES", "REFERENCE_ONLY_DTYPES"]
