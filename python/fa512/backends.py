"""The registry of kernels the dispatch table can name, and the small adapters for the
reference and Triton kernels (the interface is `fa512.backend_base.Backend`; the SM90 CuTe DSL
adapter lives in `fa512.cute_backend`)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import torch

from .backend_base import Backend
from .cute_backend import Fp8MmaBackend, Mma16Backend


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
        return None

    def unsupported(self, problem, target):
        if target.device_type == "cpu" and not target.triton_interpreter:
            return "CPU tensors need TRITON_INTERPRET=1 (the Triton interpreter)"
        from . import triton_fwd

        return triton_fwd.unsupported(problem, target)

    def make_config(self, problem, target):
        from . import triton_fwd

        return triton_fwd.make_config(problem, target)

    def launch(self, plan, args, out):
        from . import triton_fwd

        return triton_fwd.launch(plan, args, out)


BACKENDS = {
    b.name: b
    for b in (
        ReferenceBackend(),
        TritonBackend(),
        Mma16Backend(),
        Fp8MmaBackend(),
    )
}
