"""The interface every kernel presents to the dispatch table (see fa512.backends for the registry).

A backend answers four questions: is it usable here at all (`unavailable`), can it serve this
problem on this target (`unsupported`), which frozen config (`make_config`), and it launches
(`launch`: writes ``out`` in place, returns lse (Hq, total_q) float32). Both answers are a
reason string or None, so `fa512.plan` can say exactly why a kernel was passed over.
"""

from __future__ import annotations

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

    def workspace_bytes(self, num_splits: int, problem: Problem, config=None) -> int:
        """Temporary device memory one launch allocates besides lse (``config``: the variant)."""
        return workspace_bytes(num_splits, problem.total_q, problem.num_q_heads)

    def launch(self, plan, args: FwdArgs, out: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
