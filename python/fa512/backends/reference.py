"""The golden reference as a kernel of the dispatch table: the CPU kernel (any device; it syncs)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..numerics.reference import reference_forward
from .base import Backend


@dataclass(frozen=True)
class ReferenceConfig:
    compute_dtype: str = "float32"
    split_block_n: int = 64


class ReferenceBackend(Backend):
    """The reference in float32 (`fa512.numerics.reference.reference_forward`)."""

    name = "reference"

    def make_config(self, problem, target):
        return ReferenceConfig()

    def launch(self, plan, args, out):
        cfg = plan.config
        _, lse = reference_forward(
            plan.problem, args, getattr(torch, cfg.compute_dtype), plan.num_splits, cfg.split_block_n, out=out
        )
        return lse.float()


__all__ = ["ReferenceBackend", "ReferenceConfig"]
