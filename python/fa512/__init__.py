"""fa512: head_dim-512 attention forward (Gemma-4 full-attention layers), FP8 KV cache on Hopper.

``import fa512`` registers ``torch.ops.fa512.fwd``. Start with `fa512.attention` and `fa512.plan`.
"""

from .api.attention import attention, plan  # importing it registers torch.ops.fa512.fwd
from .contract import DEFAULT_SOFTMAX_SCALE, HEAD_DIM, KERNEL_NAMES, MAX_SPLITS, PRECISIONS
from .errors import KernelUnavailableError
from .numerics.reference import attention_ref, merge_partials
from .planning.dispatch import Plan, Target

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SOFTMAX_SCALE",
    "HEAD_DIM",
    "KERNEL_NAMES",
    "KernelUnavailableError",
    "MAX_SPLITS",
    "PRECISIONS",
    "Plan",
    "Target",
    "attention",
    "attention_ref",
    "merge_partials",
    "plan",
]
