"""What every kernel presents to the dispatch table (`Backend`) and to the warm call (`Launcher`).

A backend answers: is it usable here at all (`unavailable`), can it serve this problem on this
target (`unsupported`; both give a reason string or None, so `fa512.plan` can say why a kernel
was passed over), which frozen config (`make_config`), how much workspace, and it builds the
`Launcher` of a planned call signature (`make_launcher`). A launcher is made once per signature
(`fa512.launch.memo`) and then launches every call of that signature: it derives per call only
what can change between such calls (the (B, Hkv) descale views), never re-validates or re-plans.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..contract import MAX_GRID_YZ, MAX_SPLITS, REFERENCE_ONLY_DTYPES
from ..errors import KernelUnavailableError
from ..planning.descales import descale_view
from ..planning.problem import FwdArgs, Problem
from ..planning.splits import fuses, workspace_bytes

_MAX_DESCALE_VIEWS = 256  # per launcher: descale tensors seen (one per layer is typical)


class Launcher:
    """A validated, planned call signature; ``launcher(call)`` launches one call and returns lse.

    ``plan`` is the `fa512.planning.dispatch.Plan`; ``record`` what `fa512.launch.run.last_launch`
    reports for it; ``extents`` the bytes each of (q, k, v, out) can touch from its data pointer
    (the memo's overlap check); ``native_spec`` what the native warm call needs to serve the
    signature in C++ (`fa512.launch.native.launch_spec`), or None for Python-only launchers.
    The base class launches through ``launch(plan, args, out)`` of its backend.
    """

    def __init__(self, plan, extents: tuple, launch=None):
        self.plan = plan
        self.problem: Problem = plan.problem
        self.record = {"kernel": plan.kernel, "num_splits": plan.num_splits, "config": plan.config,
                       "combine": plan.combine}
        self.extents = extents
        # modes whose (B, Hkv) view is a new tensor; "none" and "per_batch_head" pass as given
        self.descale_modes = tuple(m if m in ("scalar", "per_head") else None for m in self.problem.descale_modes)
        self._descale_views: dict = {}  # id(descale) -> (descale, its (B, Hkv) view)
        self._launch = launch
        self.native_spec = None

    def descale(self, t: Optional[torch.Tensor], mode: Optional[str]) -> Optional[torch.Tensor]:
        """The (B, Hkv) view of ``t`` for a "scalar" or "per_head" ``mode``, made once per tensor
        (an expand costs ~2 us on the dev CPU)."""
        hit = self._descale_views.get(id(t))
        # The view pins t's storage; a t that was re-pointed (set_) no longer shares it.
        if hit is not None and hit[0] is t and hit[1].data_ptr() == t.data_ptr():
            return hit[1]
        if len(self._descale_views) >= _MAX_DESCALE_VIEWS:
            self._descale_views.clear()
        view = descale_view(t, mode, self.problem.batch, self.problem.num_kv_heads)
        self._descale_views[id(t)] = (t, view)
        return view

    def descales(self, qd, kd, vd) -> tuple:
        """The call's descales as the kernels take them: (B, Hkv) views or None."""
        mq, mk, mv = self.descale_modes
        return (
            qd if mq is None else self.descale(qd, mq),
            kd if mk is None else self.descale(kd, mk),
            vd if mv is None else self.descale(vd, mv),
        )

    def args(self, call) -> FwdArgs:
        """The launch tensors of ``call`` (a `fa512.call.Call` of this signature)."""
        return FwdArgs(call.q, call.k, call.v, call.page_table, call.cu_seqlens_k, call.cu_seqlens_q,
                       call.seqused_k, *self.descales(call.q_descale, call.k_descale, call.v_descale))

    def __call__(self, call) -> torch.Tensor:
        return self._launch(self.plan, self.args(call), call.out)


class PartialLauncher(Launcher):
    """A launcher of uncombined split partials (`fa512.launch.partials`): ``launcher(call)``
    returns (o_parts (S, total_q, Hq, 512), lse_parts (S, Hq, total_q)), each split's O normalised
    by its own row sum and multiplied by v_descale; ``launch(plan, args)`` computes them."""

    def __call__(self, call) -> tuple:
        return self._launch(self.plan, self.args(call))


def reference_only_dtype(problem: Problem) -> Optional[str]:
    """The refusal of a GPU kernel for q or K/V in a dtype only the reference computes (float32)."""
    for name, dtype in (("q", problem.q_dtype), ("K/V", problem.kv_dtype)):
        if dtype in REFERENCE_ONLY_DTYPES:
            return f"{name} in {dtype}: only the reference kernel computes in float32 (pass bf16/fp16)"
    return None


def grid_refusal(num_seqs: int) -> Optional[str]:
    """Why a forward whose grid has one z index per sequence (the SM90 and Triton kernels; the
    dispatch checks y) cannot be launched: CUDA caps grid z at `MAX_GRID_YZ`. None when it can."""
    if num_seqs > MAX_GRID_YZ:
        return f"{num_seqs} sequences exceed CUDA's grid limit {MAX_GRID_YZ} (grid z)"
    return None


class Backend:
    name: str = ""
    splits_kv: bool = False  # whether auto split planning applies
    max_splits: int = MAX_SPLITS  # most splits the planner picks for this kernel (its combine's reach)

    def unavailable(self) -> Optional[str]:
        return None

    def unsupported(self, problem: Problem, target) -> Optional[str]:
        return None

    def make_config(self, problem: Problem, target):
        raise NotImplementedError

    def heads_per_tile(self, problem: Problem, config) -> int:
        """Query heads of one kv head that share a CTA's M tile (GQA packing): the forward's grid
        is (m blocks of max_seqlen_q x this, Hq / this x splits, batch). The whole group here."""
        return problem.group_size

    def launches(self, num_splits: int, config) -> int:
        """Kernel launches of one call: the forward, plus the split combine when split."""
        return 1 + (num_splits > 1)

    def fused_merge_rows(self, config, problem: Problem) -> int:
        """The packed rows of one tile that a fused split forward of ``config`` merges, or 0
        where this kernel has no fused combine for the call (`fa512.planning.splits.fuses`)."""
        return 0

    def fuses_combine(self, config, problem: Problem, num_splits: int, ctas: int, target) -> bool:
        """Whether a split call of ``config`` (``num_splits``, a grid of ``ctas``) merges its
        partials inside the forward instead of in a combine kernel (`Plan.combine`)."""
        slots = target.num_sms * getattr(config, "ctas_per_sm", 1)
        return fuses(self.fused_merge_rows(config, problem), num_splits, ctas, slots)

    def kernel_names(self, config, num_splits: int, combine: str) -> tuple:
        """The compiled kernels one call runs, by compile-cache key (`Plan.kernels`); empty for a
        backend whose kernels have no such names."""
        return ()

    def workspace_bytes(self, num_splits: int, problem: Problem, config=None) -> int:
        """Temporary device memory one launch allocates besides lse (``config``: the variant)."""
        return workspace_bytes(num_splits, problem.total_q, problem.num_q_heads)

    def launch(self, plan, args: FwdArgs, out: torch.Tensor) -> torch.Tensor:
        """One launch of ``plan`` on ``args``: writes ``out`` in place, returns lse (Hq, total_q)."""
        raise NotImplementedError

    def make_launcher(self, plan, args: FwdArgs, out: torch.Tensor, extents: tuple) -> Launcher:
        """The launcher of ``plan``'s call signature (``args``, ``out``: the first call's tensors)."""
        return Launcher(plan, extents, self.launch)

    def make_partial_launcher(self, plan, args: FwdArgs) -> PartialLauncher:
        """The launcher of ``plan``'s split partials before any combine (`PartialLauncher`)."""
        raise KernelUnavailableError(f"fa512: kernel {self.name!r} has no launch of uncombined split partials")


__all__ = ["Backend", "Launcher", "PartialLauncher", "reference_only_dtype"]
