"""The dispatch table: which kernel serves a call, with which config and split count, and why.

One table (`ROUTES`) maps (target, kv dtype) to an ordered list of kernels for ``kernel="auto"``.
An explicitly requested kernel is used as is or refused with the reason (`KernelUnavailableError`);
it never falls back. ``auto`` takes the first kernel of its row that is built and supports the
call, and the plan's reason names every kernel it passed over and why.

`make_plan` is cached on its host-value arguments, so a warm call costs a dict lookup.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from ..backends.registry import BACKENDS
from ..contract import MAX_GRID_YZ
from ..errors import KernelUnavailableError, arg_error
from .precision import resolve as resolve_precision
from .problem import Problem
from .splits import PER_CTA_BW_SHARE, forward_tiles, plan_num_splits


@dataclass(frozen=True)
class Target:
    """Where a call runs: CPU, or a CUDA device with its compute capability and SM count."""

    device_type: str  # "cpu" | "cuda"
    capability: Optional[tuple] = None  # (major, minor) for CUDA
    num_sms: int = 1
    # CPU only: TRITON_INTERPRET=1 was set when the target was read. Part of the target (and so
    # of every cached plan) because it decides whether Triton can serve CPU tensors.
    triton_interpreter: bool = False

    @property
    def is_sm90(self) -> bool:
        return self.device_type == "cuda" and self.capability == (9, 0)

    def describe(self) -> str:
        if self.device_type != "cuda":
            return self.device_type
        return f"cuda sm_{self.capability[0]}{self.capability[1]} ({self.num_sms} SMs)"

    @staticmethod
    def parse(text: str) -> "Target":
        """'cpu', 'sm_90', 'sm90:132', 'sm_120:188' (SM count after the colon; default 132)."""
        text = text.strip().lower()
        if text == "cpu":
            return Target("cpu")
        name, _, sms = text.partition(":")
        digits = name.replace("sm_", "").replace("sm", "").rstrip("a")
        if not digits.isdigit() or len(digits) < 2:
            raise ValueError(f"fa512: target: got {text!r}, expected 'cpu' or 'sm_XY[:num_sms]' such as 'sm_90:132'")
        return Target("cuda", (int(digits[:-1]), int(digits[-1])), int(sms) if sms else 132)


@functools.lru_cache(maxsize=None)
def _cuda_target(index: int) -> Target:
    props = torch.cuda.get_device_properties(index)
    return Target("cuda", (props.major, props.minor), props.multi_processor_count)


def target_of(device: torch.device) -> Target:
    if device.type == "cuda":
        return _cuda_target(device.index if device.index is not None else torch.cuda.current_device())
    return Target(device.type, triton_interpreter=os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"))


@dataclass(frozen=True)
class Route:
    label: str
    matches: Callable[[Target, Problem], bool]
    kernels: tuple  # preference order for kernel="auto"


def _decode_like(p: Problem) -> bool:
    """At most one 64-row M tile of packed (query, head-in-group) rows per kv head."""
    return p.max_seqlen_q * p.group_size <= 64


# fp8 KV on SM90 runs fp8_mma (H200, 2026-11-29, Gemma-4 31B heads: decode B=64 x 8k at 100-103%
# of copy bandwidth, causal prefill of 8k tokens 590-600 TFLOP/s). Below it, each row keeps the
# better of the other two for its shape: decode, Triton (68-70% of copy bandwidth vs 64% in
# mma16's dequant path); prefill, the dequant path (349 TFLOP/s vs 189 in Triton).
ROUTES = (
    Route(
        "SM90 + fp8 KV, decode-like",
        lambda t, p: t.is_sm90 and p.kv_is_fp8 and _decode_like(p),
        ("fp8_mma", "triton", "mma16"),
    ),
    Route("SM90 + fp8 KV", lambda t, p: t.is_sm90 and p.kv_is_fp8, ("fp8_mma", "mma16", "triton")),
    Route("SM90 + bf16/fp16 KV", lambda t, p: t.is_sm90, ("mma16", "triton")),
    Route("other CUDA GPU", lambda t, p: t.device_type == "cuda", ("triton",)),
    Route("CPU", lambda t, p: t.device_type == "cpu", ("reference",)),
)


@dataclass(frozen=True)
class Plan:
    """The decision for one call shape: kernel, its frozen config, split count, workspace, why.

    ``ctas``: the forward's grid size (m blocks x tile heads x splits x sequences; 0 for the
    reference, which launches no kernel grid of its own); ``launches``: kernels per call (the
    forward, the split combine, the V^T prepass); ``combine``: how split partials are merged,
    "none" (no splits), "kernel" (the combine kernel) or "fused" (inside the forward,
    `Sm90FwdConfig.fused_combine`: grids of at most one CTA per SM)."""

    kernel: str
    config: Any
    num_splits: int
    workspace_bytes: int
    reason: str
    route: str
    problem: Problem
    target: Target
    ctas: int = 0
    launches: int = 0
    combine: str = "none"

    def describe(self) -> str:
        lines = [
            f"problem   : {self.problem.shape_str()}",
            f"target    : {self.target.describe()}",
            f"route     : {self.route}",
            f"kernel    : {self.kernel}",
            f"precision : {self.precision}",
            f"config    : {self.config}",
            *([f"kernels   : {', '.join(self.kernels)}"] if self.kernels else []),
            f"num_splits: {self.num_splits} (combine: {self.combine})",
            f"ctas      : {self.ctas} ({self.target.num_sms} SMs), {self.launches} launch(es) per call",
            f"workspace : {self.workspace_bytes} bytes",
            f"why       : {self.reason}",
        ]
        return "\n".join(lines)

    @property
    def kernels(self) -> tuple:
        """The compiled kernels a call runs, by compile-cache key: the forward variant (``config``
        with the split and fused-combine fields this call sets), then the combine and the V^T
        prepass where it has them. Empty for the reference and Triton."""
        return BACKENDS[self.kernel].kernel_names(self.config, self.num_splits, self.combine)

    @property
    def precision(self) -> str:
        """"fast" | "accurate": the numerics of what runs. fp8_mma's are the resolved request
        (`fa512.planning.precision`); every other kernel dequantises or runs 16-bit, which is
        "accurate" whatever was asked."""
        return self.problem.precision if self.kernel == "fp8_mma" else "accurate"


def _route_for(target: Target, problem: Problem) -> Route:
    for route in ROUTES:
        if route.matches(target, problem):
            return route
    raise KernelUnavailableError(f"fa512: no kernel serves device {target.describe()}")


def _refusal(name: str, problem: Problem, target: Target) -> Optional[str]:
    backend = BACKENDS[name]
    return backend.unavailable() or backend.unsupported(problem, target)


@functools.lru_cache(maxsize=4096)
def make_plan(problem: Problem, target: Target, kernel: str = "auto", num_splits: int = 0,
              precision: str = "auto") -> Plan:
    """Decide kernel, config and split count from host values only (no tensor is read).

    ``precision`` ("auto" | "fast" | "accurate") is resolved first (`fa512.planning.precision`);
    the plan's problem carries the result, which the backends' configs and refusals read."""
    numerics, precision_reason = resolve_precision(precision, problem)
    if precision == "auto" and numerics == "accurate":
        # a shape measured free takes the accurate mode only where fp8_mma has its variant
        why_not = _refusal("fp8_mma", dataclasses.replace(problem, precision="accurate"), target)
        if why_not is not None:
            numerics, precision_reason = "fast", f"precision auto -> fast: no accurate fp8_mma variant here ({why_not})"
    if numerics != problem.precision:
        problem = dataclasses.replace(problem, precision=numerics)
    route = _route_for(target, problem)
    if kernel == "auto":
        skipped = []
        for name in route.kernels:
            why_not = _refusal(name, problem, target)
            if why_not is None:
                break
            skipped.append(f"{name}: {why_not}")
        else:
            raise KernelUnavailableError(
                f"fa512: no kernel can serve {problem.shape_str()} on {target.describe()}: " + "; ".join(skipped)
            )
        reason = f"auto on {route.label} -> {name}"
        if skipped:
            reason += " (passed over " + "; ".join(skipped) + ")"
    else:
        name = kernel
        why_not = _refusal(name, problem, target)
        if why_not is not None:
            raise KernelUnavailableError(f"fa512: kernel={name!r} cannot serve this call: {why_not}")
        reason = f"requested kernel={name!r}"

    backend = BACKENDS[name]
    config = backend.make_config(problem, target)
    pack = backend.heads_per_tile(problem, config)
    # The forwards' grid y is (tile heads x splits): CUDA caps it at MAX_GRID_YZ.
    tile_heads = max(1, problem.num_q_heads // pack)
    grid_splits = max(1, MAX_GRID_YZ // tile_heads)
    if num_splits > 0:
        if backend.splits_kv and num_splits > grid_splits:
            raise arg_error(ValueError, "num_splits", num_splits, f"at most {grid_splits} here",
                            f"{tile_heads} tile heads x splits must fit CUDA's grid limit {MAX_GRID_YZ}")
        splits, split_reason = num_splits, "num_splits given by the caller"
    elif not backend.splits_kv:
        splits, split_reason = 1, f"{name} does not split KV"
    else:
        decision = plan_num_splits(
            batch=problem.batch,
            num_kv_heads=problem.num_q_heads // pack,  # as the kernel tiles them
            group_size=pack,
            max_seqlen_q=problem.max_seqlen_q,
            max_seqlen_k=problem.max_seqlen_k,
            window_left=problem.window_left,
            window_right=problem.window_right,
            num_sms=target.num_sms,
            block_m=config.block_m,
            block_n=config.block_n,
            kv_elem_bytes=problem.kv_dtype.itemsize,
            ctas_per_sm=config.ctas_per_sm,
            cta_bw_share=getattr(config, "cta_bw_share", PER_CTA_BW_SHARE),
            max_splits=min(backend.max_splits, grid_splits),
            fused_rows=backend.fused_merge_rows(config, problem),
        )
        splits, split_reason = decision.num_splits, decision.reason
    ws = backend.workspace_bytes(splits, problem, config) if backend.splits_kv else 0
    launches = backend.launches(splits, config) if problem.total_q and problem.max_seqlen_q else 0
    ctas = splits * forward_tiles(batch=problem.batch, num_tile_heads=problem.num_q_heads // pack, heads_per_tile=pack,
                                  max_seqlen_q=problem.max_seqlen_q, block_m=config.block_m) if launches else 0
    if problem.kv_is_fp8:  # the numerics of an fp8 cache depend on the kernel and the request
        reason += f"; {precision_reason}"
    combine = "none"
    if splits > 1 and launches:
        combine = "fused" if backend.fuses_combine(config, problem, splits, ctas, target) else "kernel"
        if combine == "fused":
            launches -= 1
    return Plan(name, config, splits, ws, f"{reason}; splits: {split_reason}", route.label, problem, target,
                ctas, launches, combine)


__all__ = ["Plan", "ROUTES", "Route", "Target", "make_plan", "target_of"]
