"""`mma16` and `fp8_mma`: the SM90 CuTe DSL d512 forward behind the `fa512.backends.Backend` interface.

mma16 was registered after profiles/gpu_mma16_smoke.py passed 27/27 cases on an H200
(2026-11-29); fp8_mma runs the same kernel family with FP8 wgmma (profiles/gpu_fp8_mma.py). Profiles may also call `Mma16Backend.launch` directly with a
plan-like object (``config``, ``num_splits``, ``problem``) and a config override.

Launch path (no host sync, graph-capturable): pick the compiled variant from the compile cache
(memory dict after the first call), allocate lse (and the fp32 split workspace) from the torch
caching allocator, call the tvm-ffi function with torch tensors and the current stream; with
splits, run the combine kernel on the same stream. Variants with ``vt_prepass`` (fp8_mma
prefill) first run `cute_kernels.v_prepass` into a V^T scratch, which the forward kernel takes in
V's place.
"""

from __future__ import annotations

import importlib.util
from typing import Callable, NamedTuple, Optional

import torch

from .backend_base import Backend
from .errors import arg_error
from .validate import FwdArgs, Problem

WINDOW_INF = 1 << 30  # cute_kernels.mask.WINDOW_INF: "unbounded" window side


def mask_kind(problem: Problem) -> str:
    """"causal" (window (inf, 0)), "local" (any finite window), or "none".

    Causal with one query per sequence is "none": bottom-right aligned, that query sits at the
    last key and sees every key (the kernel still stops at seqused_k), so decode skips the
    boundary-block masking.
    """
    if problem.window_left >= 0:
        return "local"
    if problem.window_right == 0:
        return "none" if problem.max_seqlen_q <= 1 else "causal"
    if problem.window_right > 0:
        return "local"
    return "none"


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "f16", torch.float8_e4m3fn: "fp8_e4m3"}[dtype]


class LaunchState(NamedTuple):
    """What a warm launch of one call signature needs (`Mma16Backend.launch`, `_run`)."""

    fwd: Callable  # compiled forward (tvm-ffi function)
    combine: Optional[Callable]  # split-KV combine, with splits
    scalars: tuple  # softmax_scale, window_left, window_right, max_seqlen_q, num_splits, trace_addr
    kv_fp8: bool  # e4m3 K/V cross tvm-ffi as uint8
    device: torch.device
    index: Optional[int]  # device index, for the stream getter
    raw_stream: Callable
    lse_shape: tuple
    o_part_shape: tuple  # split partials (splits only)
    lse_part_shape: tuple
    prepass: Optional[Callable]  # V^T prepass (vt_prepass variants)
    vt_shape: Optional[tuple]  # its scratch

    def native_spec(self, libraries: tuple) -> tuple:
        """The part `fa512.native.launch_spec` hands to C++ (no device or stream getter), with
        the kernels' libraries for the direct launch."""
        return (self.fwd, self.combine, self.scalars, self.kv_fp8, self.lse_shape, self.o_part_shape,
                self.lse_part_shape, self.prepass, self.vt_shape, libraries)


def vt_scratch_shape(problem: Problem) -> tuple:
    """The V^T scratch of a ``vt_prepass`` variant (`cute_kernels.v_prepass`): (B, Hkv, 512,
    max_seqlen_k rounded up to whole 64-key blocks), e4m3 bytes."""
    keys = -(-max(problem.max_seqlen_k, 1) // 64) * 64
    return (problem.batch, problem.num_kv_heads, 512, keys)


def _check_tma_operand(name: str, t: torch.Tensor) -> None:
    """TMA needs 16-byte aligned base addresses and 16-byte multiple strides (except the last)."""
    esize = t.element_size()
    if t.data_ptr() % 16:
        raise arg_error(ValueError, name, f"data_ptr % 16 = {t.data_ptr() % 16}", "a 16-byte aligned base address",
                        "the mma16 kernel loads it with TMA")
    for dim, stride in enumerate(t.stride()[:-1]):
        if t.shape[dim] > 1 and (stride * esize) % 16:
            raise arg_error(ValueError, name, f"strides {tuple(t.stride())}",
                            "strides that are multiples of 16 bytes (except the last dim)",
                            "the mma16 kernel loads it with TMA")


class Mma16Backend(Backend):
    """The SM90 16-bit-MMA kernel: bf16/fp16 KV as is; fp8 e4m3 KV dequantised to f16 in-kernel.

    Its launch path serves every `cute_kernels.fwd_sm90.FlashFwdSm90` variant (`Fp8MmaBackend`
    differs only in the config it builds)."""

    name = "mma16"
    splits_kv = True

    def unavailable(self) -> Optional[str]:
        for module, dist in (("cutlass", "nvidia-cutlass-dsl"), ("tvm_ffi", "apache-tvm-ffi")):
            if importlib.util.find_spec(module) is None:
                return f"{dist} is not installed"
        return None

    def unsupported(self, problem: Problem, target) -> Optional[str]:
        if not target.is_sm90:
            return f"needs an SM90 GPU (H100/H200), got {target.describe()}"
        ok, why = self.make_config(problem, target).can_implement()
        return None if ok else why

    fp8_mma = False  # fp8 KV: dequantised to f16 (the A/B control); Fp8MmaBackend: FP8 wgmma

    def workspace_bytes(self, num_splits: int, problem: Problem, config=None) -> int:
        ws = super().workspace_bytes(num_splits, problem)
        if config is not None and config.vt_prepass:
            batch, hkv, d, keys = vt_scratch_shape(problem)
            ws += batch * hkv * d * keys
        return ws

    def make_config(self, problem: Problem, target):
        from cute_kernels.variants import default_config

        return default_config(
            kv_dtype=_dtype_name(problem.kv_dtype),
            q_dtype=_dtype_name(problem.q_dtype),
            mask=mask_kind(problem),
            paged=problem.paged,
            page_size=problem.page_size,
            group=problem.group_size,
            split=False,  # set per launch from plan.num_splits
            descale=tuple(mode != "none" for mode in problem.descale_modes),
            fp8_mma=self.fp8_mma,
            max_seqlen_k=problem.max_seqlen_k,
            max_seqlen_q=problem.max_seqlen_q,
        )

    def launch(self, plan, args: FwdArgs, out: torch.Tensor, config=None, trace_addr: int = 0) -> torch.Tensor:
        """Run the kernel; ``config`` overrides ``plan.config`` (A/B profiling, diagnostic stages).

        ``trace_addr``: device-visible address of a host-mapped int32 buffer of
        `cute_kernels.diagnostics.TRACE_BUFFER_WORDS` words, used by ``config.trace`` variants only
        (profiles/gpu_mma16_smoke.py --diag --trace); 0 otherwise.

        When ``plan`` is a `fa512.call_cache.Launcher` (one call signature), what depends only
        on the signature (compiled functions, converted scalars, shapes, stride checks) is
        derived on its first launch and kept in ``plan.launch_state``; a warm launch then checks
        data-pointer alignment, allocates lse and calls the kernel (profiles/host_overhead.py).
        """
        q, k, v = args.q, args.k, args.v
        state = getattr(plan, "launch_state", None) if config is None and not trace_addr else None
        if state is None:
            from . import compile_cache

            problem: Problem = plan.problem
            num_splits = max(1, int(plan.num_splits))
            cfg = (config or plan.config).with_split(num_splits > 1)
            total_q, hq = q.shape[0], q.shape[1]
            device = q.device
            if problem.max_seqlen_q == 0 or total_q == 0:
                return torch.full((hq, total_q), float("-inf"), dtype=torch.float32, device=device)
            for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):  # fp8 and its uint8 view: same bytes
                _check_tma_operand(name, t)
            wl = problem.window_left if problem.window_left >= 0 else WINDOW_INF
            wr = problem.window_right if problem.window_right >= 0 else WINDOW_INF
            # The raw-stream getter skips building a torch.cuda.Stream object (~1-2 us); CPU
            # builds of torch lack it.
            raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            if raw_stream is None:
                raw_stream = lambda index: torch.cuda.current_stream(index).cuda_stream  # noqa: E731
            fwd = compile_cache.get_kernel(compile_cache.KernelSpec("fwd", cfg))
            combine = compile_cache.get_kernel(compile_cache.KernelSpec("combine", cfg.q_dtype)) if num_splits > 1 else None
            prepass = vt_shape = None
            if cfg.vt_prepass:
                prepass = compile_cache.get_kernel(compile_cache.KernelSpec("vt_prepass", cfg.page_size))
                vt_shape = vt_scratch_shape(problem)
            state = LaunchState(
                fwd, combine,
                (float(problem.softmax_scale), int(wl), int(wr), int(problem.max_seqlen_q), num_splits, int(trace_addr)),
                k.dtype == torch.float8_e4m3fn, device, device.index, raw_stream,
                (hq, total_q), (num_splits, total_q, hq, q.shape[2]), (num_splits, hq, total_q),
                prepass, vt_shape,
            )
            if config is None and not trace_addr and hasattr(plan, "launch_state"):
                plan.launch_state = state
                plan.fast = _fast_launch(plan, state)
                plan.native_state = state.native_spec(tuple(compile_cache.library_of(f) for f in (fwd, combine, prepass)))
        return _run(state, q, k, v, out, args.cu_seqlens_q, args.cu_seqlens_k, args.seqused_k, args.page_table,
                    args.q_descale, args.k_descale, args.v_descale)


def _run(state: LaunchState, q, k, v, out, cuq, cuk, sk, pt, qd, kd, vd) -> torch.Tensor:
    """One launch from a launch state (see `Mma16Backend.launch`); descales are (B, Hkv) views."""
    (fwd, combine, scalars, kv_fp8, device, index, raw_stream, lse_shape, o_part_shape, lse_part_shape,
     prepass, vt_shape) = state
    if kv_fp8:  # e4m3 crosses tvm-ffi as uint8; the kernel recasts it
        k, v = k.view(torch.uint8), v.view(torch.uint8)
    # Strides are fixed per launch_state (checked when it was made); data pointers are not.
    if (q.data_ptr() | k.data_ptr() | v.data_ptr() | out.data_ptr()) & 15:
        for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
            _check_tma_operand(name, t)
    stream = raw_stream(index)
    if prepass is not None:  # V^T once per key block; the forward kernel reads it in V's place
        vt = torch.empty(vt_shape, dtype=torch.uint8, device=device)
        prepass(v, pt, cuk, sk, vt, stream)
        v = vt
    lse = torch.empty(lse_shape, dtype=torch.float32, device=device)
    if combine is None:
        fwd(q, k, v, out, lse, cuq, cuk, sk, pt, qd, kd, vd, *scalars, stream)
        return lse
    o_part = torch.empty(o_part_shape, dtype=torch.float32, device=device)
    lse_part = torch.empty(lse_part_shape, dtype=torch.float32, device=device)
    fwd(q, k, v, o_part, lse_part, cuq, cuk, sk, pt, qd, kd, vd, *scalars, stream)
    combine(o_part, lse_part, out, lse, cuq, scalars[4], stream)
    return lse


def _fast_launch(launcher, state):
    """The warm launch of one call signature, on the op's raw 19-argument call tuple: the
    (B, Hkv) descale views, then `_run`, without building FwdArgs."""
    mq, mk, mv = launcher.descale_modes
    descale = launcher.descale

    def fast(call: tuple) -> torch.Tensor:
        q, k, v, out, pt, cuk, cuq, _, sk, _, _, _, _, _, qd, kd, vd, _, _ = call
        if mq is not None:
            qd = descale(qd, mq)
        if mk is not None:
            kd = descale(kd, mk)
        if mv is not None:
            vd = descale(vd, mv)
        return _run(state, q, k, v, out, cuq, cuk, sk, pt, qd, kd, vd)

    return fast


class Fp8MmaBackend(Mma16Backend):
    """The SM90 FP8-MMA kernel (same pipeline as mma16, `Sm90FwdConfig.mma_path="fp8_mma"`): an
    e4m3 KV cache MMA'd as e4m3 (QGMMA) for QK^T and P.V, Q quantised in-kernel per row."""

    name = "fp8_mma"
    fp8_mma = True

    def unsupported(self, problem: Problem, target) -> Optional[str]:
        if not problem.kv_is_fp8:
            return f"needs an fp8 e4m3 KV cache, got {problem.kv_dtype} (bf16/fp16 KV: mma16)"
        return super().unsupported(problem, target)


__all__ = ["Mma16Backend", "Fp8MmaBackend", "LaunchState", "mask_kind", "vt_scratch_shape", "WINDOW_INF"]
