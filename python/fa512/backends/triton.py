"""The Triton forward as a kernel of the dispatch table (the kernels: `fa512.backends.triton_fwd`,
imported on first use so that ``import fa512`` does not load Triton)."""

from __future__ import annotations

import importlib.util

from .base import Backend, PartialLauncher, reference_only_dtype


class TritonBackend(Backend):
    """Every CUDA GPU; CPU tensors only under the interpreter (TRITON_INTERPRET=1)."""

    name = "triton"
    splits_kv = True
    # Its combine holds every split of a 128-column slice in one program (`triton_fwd._combine_kernel`):
    # past 32 splits that is more registers than a program has. Callers may still ask for more.
    max_splits = 32

    def unavailable(self):
        if importlib.util.find_spec("triton") is None:
            return "triton is not installed"
        return None

    def unsupported(self, problem, target):
        refusal = reference_only_dtype(problem)
        if refusal is not None:
            return refusal
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

    def make_partial_launcher(self, plan, args):
        from . import triton_fwd

        return PartialLauncher(plan, (), lambda plan, args: triton_fwd.launch(plan, args, None, partials=True))


__all__ = ["TritonBackend"]
