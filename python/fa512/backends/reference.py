"""The golden reference as a kernel of the dispatch table: the CPU kernel (any device; it syncs)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..numerics.reference import reference_forward
from .base import Backend, PartialLauncher


@dataclass(frozen=True)
class ReferenceConfig:
    compute_dtype: str = "float32"
    split_block_n: int = 64


class ReferenceBackend(Backend):
    """The reference in float32 (`fa512.numerics.reference.reference_forward`)."""

    name = "reference"

    def make_config(self, problem, target):
        return ReferenceConfig()

    def launches(self, num_splits, config):
        return 0  # torch operations, no kernel grid of its own

    def launch(self, plan, args, out):
        cfg = plan.config
        _, lse = reference_forward(
            plan.problem, args, getattr(torch, cfg.compute_dtype), plan.num_splits, cfg.split_block_n, out=out
        )
        return lse.float()

    def make_partial_launcher(self, plan, args):
        """One partial per call in float64 whatever the config's dtype: the oracle of the merge
        (`fa512.distributed` on CPU equals the float64 reference of the whole cache)."""
        cfg = plan.config

        def launch(plan, args):
            out, lse = reference_forward(plan.problem, args, torch.float64, plan.num_splits, cfg.split_block_n)
            return out.unsqueeze(0), lse.unsqueeze(0)

        return PartialLauncher(plan, (), launch)


__all__ = ["ReferenceBackend", "ReferenceConfig"]
