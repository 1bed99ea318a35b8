"""Backend adapters: the one interface every kernel presents to the dispatch table.

A backend answers four questions: is it usable here at all (`unavailable`), can it serve this
problem on this target (`unsupported`), which frozen config (`make_config`), and it launches
(`launch`: writes ``out`` in place, returns lse (Hq, total_q) float32). Both answers are a
reason string or None, so `fa512.plan` can say exactly why a kernel was passed over.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Optional

import torch

from .splits import workspace_bytes
from .validate import FwdArgs, Problem


class Backend:
    name: str = ""
    splits_kv: bool = False  # whether auto split planning applies

    def unavailable(self) -> Optional[str]:
        return None

    def unsupported(self, problem: Problem, target) -> Optional[str]:
        return None

    def make_config(self, problem: Problem, target):
        raise NotImplementedError

    def workspace_bytes(self, num_splits: int, problem: Problem) -> int:
        return workspace_bytes(num_splits, problem.total_q, problem.num_q_heads)

    def launch(self, plan, args: FwdArgs, out: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


@dataclass(frozen=True)
class ReferenceConfig:
    compute_dtype: str = "float32"
    split_block_n: int = 64


class ReferenceBackend(Backend):
    """The golden reference in float32: the CPU implementation (works on any device, syncs)."""

    name = "reference"

    def make_config(self, problem, target):
        return ReferenceConfig()

    def launch(self, plan, args, out):
        from .reference import reference_forward

        cfg = plan.config
        _, lse = reference_forward(
            plan.problem, args, getattr(torch, cfg.compute_dtype), plan.num_splits, cfg.split_block_n, out=out
        )
        return lse.float()


class TritonBackend(Backend):
    """Triton forward: every CUDA GPU; CPU tensors only under the interpreter (TRITON_INTERPRET=1)."""

    name = "triton"
    splits_kv = True

    def unavailable(self):
        if importlib.util.find_spec("triton") is None:
            return "triton is not installed"
        if importlib.util.find_spec("fa512.triton_fwd") is None:
            return "fa512.triton_fwd is not built yet (issue 3)"
        return None

    def unsupported(self, problem, target):
        if target.device_type == "cpu" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
            return "CPU tensors need TRITON_INTERPRET=1 (the Triton interpreter)"
        from . import triton_fwd

        return triton_fwd.unsupported(problem, target)

    def make_config(self, problem, target):
        from . import triton_fwd

        return triton_fwd.make_config(problem, target)

    def launch(self, plan, args, out):
        from . import triton_fwd

        return triton_fwd.launch(plan, args, out)


class NotBuiltBackend(Backend):
    """A kernel the dispatch table knows about but that has not landed yet; always refuses."""

    def __init__(self, name: str, note: str):
        self.name = name
        self._note = note

    def unavailable(self):
        return self._note


BACKENDS = {
    b.name: b
    for b in (
        ReferenceBackend(),
        TritonBackend(),
        NotBuiltBackend("mma16", "the SM90 16-bit-MMA kernel is not built yet (issue 4)"),
        NotBuiltBackend("fp8_mma", "the SM90 FP8-MMA kernel is not built yet (issue 5)"),
    )
}
