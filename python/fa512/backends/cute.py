"""`mma16` and `fp8_mma`: the SM90 CuTe DSL d512 forward (`cute_kernels.fwd_sm90`) as kernels of
the dispatch table.

mma16 was registered after profiles/gpu_mma16_smoke.py passed 27/27 cases on an H200
(2026-11-29); fp8_mma runs the same kernel family with FP8 wgmma. Both share one launcher.

Launch path (no host sync, graph-capturable): the compiled variants come from the compile cache
once per call signature (`CuteLauncher`); each call checks data-pointer alignment, allocates lse
(and the fp32 split workspace) from the torch caching allocator and calls the tvm-ffi functions
with torch tensors and the current stream: the V^T prepass first for the ``vt_prepass`` variants
(fp8_mma prefill; the forward takes its scratch in V's place), the forward, and with splits the
combine. `fa512.launch.native` serves the same signature from C++ with what ``native_spec`` holds.
Profiles may launch one call with a config override (`Mma16Backend.launch`), outside the memo.
"""

from __future__ import annotations

import importlib.util
from typing import Callable, NamedTuple, Optional

import torch

from ..errors import KernelUnavailableError, arg_error
from ..planning.problem import FwdArgs, Problem
from .base import Backend, Launcher, PartialLauncher, grid_refusal, reference_only_dtype

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
    """What every launch of one call signature needs (`CuteLauncher`, `_run`)."""

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
    fused: bool = False  # split partials merged inside the forward (`Plan.combine` "fused")

    def native_spec(self, libraries: tuple) -> tuple:
        """The part `fa512.launch.native.launch_spec` hands to C++ (no device or stream getter),
        with the kernels' libraries for the direct launch."""
        return (self.fwd, self.combine, self.scalars, self.kv_fp8, self.fused, self.lse_shape, self.o_part_shape,
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


def _raw_stream_getter() -> Callable:
    """The current stream as an int; the raw getter skips building a torch.cuda.Stream object
    (~1-2 us). CPU builds of torch lack it."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        raw = lambda index: torch.cuda.current_stream(index).cuda_stream  # noqa: E731
    return raw


def kernel_specs(config, num_splits: int, partials: bool = False, fused: bool = False) -> tuple:
    """The compiled kernels one launch of ``config`` with ``num_splits`` runs, as compile-cache
    specs: (forward of the split or unsplit variant, the combine or None, the V^T prepass or None).
    ``partials``: the split variant whatever the split count, and no combine (`_run_partials`);
    ``fused``: the split variant that merges its partials itself (`Plan.combine` "fused")."""
    from .compile_cache import KernelSpec

    split = partials or num_splits > 1
    cfg = config.with_split(split).with_(fused_combine=fused and split and not partials)
    return (
        KernelSpec("fwd", cfg),
        KernelSpec("combine", cfg.q_dtype) if num_splits > 1 and not partials and not cfg.fused_combine else None,
        KernelSpec("vt_prepass", cfg.page_size) if cfg.vt_prepass else None,
    )


def forward_config(config, num_splits: int, combine: str):
    """The forward variant a launch of a plan's ``config`` with ``num_splits`` and its
    ``combine`` ("none", "kernel", "fused": `Plan.combine`) compiles."""
    return kernel_specs(config, num_splits, fused=combine == "fused")[0].config


# -- the fused combine's arrival counters (`cute_kernels.fused_combine`) --------------------------
# int32 words per stream: (arrival, departure) per tile; a fused grid (at most one CTA per SM,
# at least 2 splits a tile) has at most num_sms / 2 tiles
COUNTER_WORDS = 2048
_counters: dict = {}


def split_counters(device: torch.device, stream: int) -> torch.Tensor:
    """The zeroed counters the fused-combine forwards of one (device, stream) share: calls on
    one stream run in order and leave them zeroed; calls on two streams must not share them.
    Made once per stream, outside any capture. A call inside a CUDA-graph capture gets the
    capture's own buffer instead (one per capture and captured stream: the branches of one
    capture may run at once), made at its first fused call there (its memset is captured, so
    every replay starts from zeros, whichever stream replays it): a buffer shared with eager
    calls or with other graphs would be zeroed only where it was made, and two graphs replayed
    at once would count into each other. Buffers live as long as the process (8 KB each).
    Stream handles are keys: a stream destroyed while its kernels run and a new stream given the
    same handle would share one. The native warm call keeps its own per stream the same way
    (``csrc/fast_call.cpp``, ``split_counters``) and leaves captures to this path.

    Inside a capture this makes no CUDA call but ``cuStreamGetCaptureInfo`` (`_capture_info`)
    and the captured memset of a new buffer."""
    key = (device.index, stream)
    if device.type == "cuda":
        capturing, capture_id = _capture_info(stream)
        if capturing:
            key = ("capture", capture_id, stream)
    buf = _counters.get(key)
    if buf is None:
        buf = _counters[key] = torch.zeros(COUNTER_WORDS, dtype=torch.int32, device=device)
    return buf


_stream_capture_info = None  # libcuda's cuStreamGetCaptureInfo, resolved at first use


def _capture_info(stream: int) -> tuple:
    """(capturing, capture id) of a stream: the id is unique over the process's lifetime.

    libcuda's own entry point through ctypes, not cuda.bindings: binding it is a dlopen and a
    dlsym (no CUDA call; libcuda is loaded already), where cuda.bindings' first driver call
    initialises its whole driver table, which need not happen inside a capture. A capture
    that was invalidated before this call (status 2: an earlier capture-unsafe call) has no
    valid id (the driver returns one only for an active capture): that raises here, naming
    the cause, instead of failing at the next captured operation."""
    global _stream_capture_info
    import ctypes

    fn = _stream_capture_info
    if fn is None:
        lib = ctypes.CDLL("libcuda.so.1")
        # the _v2 entry (CUDA 11.3+) takes (stream, status*, id*, graph*, deps*, num_deps*), the
        # first three as the original entry, which older drivers have alone
        name = "cuStreamGetCaptureInfo_v2" if hasattr(lib, "cuStreamGetCaptureInfo_v2") else "cuStreamGetCaptureInfo"
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint64)] + \
            ([ctypes.c_void_p] * 3 if name.endswith("_v2") else [])
        _stream_capture_info = fn
    status, capture_id = ctypes.c_int(0), ctypes.c_uint64(0)
    extra = (None,) * (len(fn.argtypes) - 3)
    err = fn(ctypes.c_void_p(stream), ctypes.byref(status), ctypes.byref(capture_id), *extra)
    if err != 0:
        raise RuntimeError(f"fa512: cuStreamGetCaptureInfo failed (CUresult {err}) for the fused combine's counters")
    if status.value == 2:  # CU_STREAM_CAPTURE_STATUS_INVALIDATED
        raise RuntimeError(
            "fa512: the CUDA-graph capture on this stream was invalidated before this fused-combine call "
            "(an earlier capture-unsafe call in this capture, in this or, in global capture mode, another thread)")
    return status.value == 1, int(capture_id.value)


def launch_state(plan, args: FwdArgs, out: Optional[torch.Tensor], config=None, trace_addr: int = 0,
                 partials: bool = False) -> LaunchState:
    """Compile (or load) the kernels of ``plan`` (``config`` overrides its config) and fix
    everything a launch derives from the call signature; checks the TMA strides of ``args``.
    ``partials``: the split variant whatever the split count, for `_run_partials` (no out)."""
    from . import compile_cache

    problem: Problem = plan.problem
    num_splits = max(1, int(plan.num_splits))
    q = args.q
    operands = (("q", q), ("k", args.k), ("v", args.v)) + ((("out", out),) if out is not None else ())
    for name, t in operands:  # fp8 and its uint8 view: same bytes
        _check_tma_operand(name, t)
    wl = problem.window_left if problem.window_left >= 0 else WINDOW_INF
    wr = problem.window_right if problem.window_right >= 0 else WINDOW_INF
    total_q, hq = q.shape[0], q.shape[1]
    fused = plan.combine == "fused" and not partials
    fwd, combine, prepass = (None if spec is None else compile_cache.get_kernel(spec)
                             for spec in kernel_specs(config or plan.config, num_splits, partials, fused))
    vt_shape = vt_scratch_shape(problem) if prepass is not None else None
    return LaunchState(
        fwd, combine,
        (float(problem.softmax_scale), int(wl), int(wr), int(problem.max_seqlen_q), num_splits, int(trace_addr)),
        args.k.dtype == torch.float8_e4m3fn, q.device, q.device.index, _raw_stream_getter(),
        (hq, total_q), (num_splits, total_q, hq, q.shape[2]), (num_splits, hq, total_q),
        prepass, vt_shape, fused,
    )


def _run(state: LaunchState, q, k, v, out, cuq, cuk, sk, pt, qd, kd, vd) -> torch.Tensor:
    """One launch from a launch state; descales are (B, Hkv) views."""
    (fwd, combine, scalars, kv_fp8, device, index, raw_stream, lse_shape, o_part_shape, lse_part_shape,
     prepass, vt_shape, fused) = state
    if kv_fp8:  # e4m3 crosses tvm-ffi as uint8; the kernel recasts it
        k, v = k.view(torch.uint8), v.view(torch.uint8)
    # Strides are fixed per launch state (checked when it was made); data pointers are not.
    if (q.data_ptr() | k.data_ptr() | v.data_ptr() | out.data_ptr()) & 15:
        for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
            _check_tma_operand(name, t)
    stream = raw_stream(index)
    if prepass is not None:  # V^T once per key block; the forward kernel reads it in V's place
        v = _prepass(state, v, cuk, sk, pt, stream)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=device)
    if combine is None and not fused:
        fwd(q, k, v, out, lse, cuq, cuk, sk, pt, qd, kd, vd, *scalars, None, None, None, stream)
        return lse
    o_part = torch.empty(o_part_shape, dtype=torch.float32, device=device)
    lse_part = torch.empty(lse_part_shape, dtype=torch.float32, device=device)
    if fused:  # the forward merges the partials into out and lse itself
        counters = split_counters(device, stream)
        fwd(q, k, v, o_part, lse_part, cuq, cuk, sk, pt, qd, kd, vd, *scalars, out, lse, counters, stream)
        return lse
    fwd(q, k, v, o_part, lse_part, cuq, cuk, sk, pt, qd, kd, vd, *scalars, None, None, None, stream)
    combine(o_part, lse_part, out, lse, cuq, scalars[4], stream)
    return lse


def _prepass(state: LaunchState, v, cuk, sk, pt, stream) -> torch.Tensor:
    """The V^T scratch the forward of a ``vt_prepass`` variant reads in V's place."""
    vt = torch.empty(state.vt_shape, dtype=torch.uint8, device=state.device)
    state.prepass(v, pt, cuk, sk, vt, stream)
    return vt


def _run_partials(state: LaunchState, args: FwdArgs) -> tuple:
    """The split variant's forward alone: fp32 (o_part (S, total_q, Hq, 512), lse_part (S, Hq,
    total_q)), no combine; a state made with ``launch_state(..., partials=True)``."""
    q, k, v = args.q, args.k, args.v
    if state.kv_fp8:
        k, v = k.view(torch.uint8), v.view(torch.uint8)
    if (q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15:
        for name, t in (("q", q), ("k", k), ("v", v)):
            _check_tma_operand(name, t)
    stream = state.raw_stream(state.index)
    if state.prepass is not None:
        v = _prepass(state, v, args.cu_seqlens_k, args.seqused_k, args.page_table, stream)
    o_part = torch.empty(state.o_part_shape, dtype=torch.float32, device=state.device)
    lse_part = torch.empty(state.lse_part_shape, dtype=torch.float32, device=state.device)
    state.fwd(q, k, v, o_part, lse_part, args.cu_seqlens_q, args.cu_seqlens_k, args.seqused_k, args.page_table,
              args.q_descale, args.k_descale, args.v_descale, *state.scalars, None, None, None, stream)
    return o_part, lse_part


class CuteLauncher(Launcher):
    """The SM90 kernels of one call signature: a `LaunchState` made once, then `_run` per call
    on the call's own tensors (no FwdArgs built); C++ serves it from ``native_spec``."""

    def __init__(self, plan, extents: tuple, state: LaunchState):
        super().__init__(plan, extents)
        from . import compile_cache

        self.state = state
        self.native_spec = state.native_spec(
            tuple(compile_cache.library_of(f) for f in (state.fwd, state.combine, state.prepass))
        )

    def __call__(self, call) -> torch.Tensor:
        q, k, v, out, pt, cuk, cuq, _, sk, _, _, _, _, _, qd, kd, vd, _, _, _ = call
        mq, mk, mv = self.descale_modes  # `Launcher.descales`, inlined: this runs on every warm call
        if mq is not None:
            qd = self.descale(qd, mq)
        if mk is not None:
            kd = self.descale(kd, mk)
        if mv is not None:
            vd = self.descale(vd, mv)
        return _run(self.state, q, k, v, out, cuq, cuk, sk, pt, qd, kd, vd)


class _EmptyLauncher(Launcher):
    """A signature with no query rows: nothing to launch, lse is all -inf."""

    def __call__(self, call) -> torch.Tensor:
        q = call.q
        return torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float32, device=q.device)


class Mma16Backend(Backend):
    """The SM90 16-bit-MMA kernel: bf16/fp16 KV as is; fp8 e4m3 KV dequantised to f16 in-kernel
    (the control of the FP8 A/B). `Fp8MmaBackend` differs only in the config it builds."""

    name = "mma16"
    splits_kv = True
    fp8_mma = False  # fp8 KV: dequantised to f16; Fp8MmaBackend: FP8 wgmma

    def unavailable(self) -> Optional[str]:
        for module, dist in (("cutlass", "nvidia-cutlass-dsl"), ("tvm_ffi", "apache-tvm-ffi")):
            if importlib.util.find_spec(module) is None:
                return f"{dist} is not installed"
        return None

    def unsupported(self, problem: Problem, target) -> Optional[str]:
        refusal = reference_only_dtype(problem)
        if refusal is not None:
            return refusal
        if not target.is_sm90:
            return f"needs an SM90 GPU (H100/H200), got {target.describe()}"
        config = self.make_config(problem, target)
        ok, why = config.can_implement()
        if not ok:
            return why
        return grid_refusal(problem.batch)

    def heads_per_tile(self, problem: Problem, config) -> int:
        return config.qhead_per_kvhead  # the group when 64 rows hold whole groups, else 1

    def launches(self, num_splits: int, config) -> int:
        return super().launches(num_splits, config) + bool(config.vt_prepass)

    def kernel_names(self, config, num_splits: int, combine: str) -> tuple:
        return tuple(spec.key() for spec in kernel_specs(config, num_splits, fused=combine == "fused")
                     if spec is not None)

    def fused_merge_rows(self, config, problem: Problem) -> int:
        """Split calls merge inside the forward (`fa512.planning.splits.fuses`: a grid resident
        at once, at most `MAX_FUSED_MERGES` (row, quarter) pieces a CTA, since a CTA's pieces
        run one after another where the combine kernel runs them all at once; MTP q=4 B=32 x 28k
        at 4 splits would give each CTA 32) where the config has a fused twin (`variant_list`:
        no local windows, not the alternating prefill layout). fp8_mma only: the dequant control
        lost its A/B (H200 2026-12-03, decode B=1 x 8k, 22 splits, CUDA-graph replay: mma16 on
        bf16 KV 27.7 us with the combine kernel, 29.1-29.2 fused; on fp8 KV 30-31 vs 33 us),
        where fp8_mma won (17.6 vs 16.6-16.9 us)."""
        if config.mma_path != "fp8_mma" or config.mask == "local" or config.layout == "alternate":
            return 0
        return min(config.block_m, max(1, problem.max_seqlen_q) * config.qhead_per_kvhead)

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
            accurate=self.fp8_mma and problem.precision == "accurate",
        )

    def make_launcher(self, plan, args: FwdArgs, out: torch.Tensor, extents: tuple) -> Launcher:
        if plan.problem.max_seqlen_q == 0 or plan.problem.total_q == 0:
            return _EmptyLauncher(plan, extents)
        return CuteLauncher(plan, extents, launch_state(plan, args, out))

    def make_partial_launcher(self, plan, args: FwdArgs) -> PartialLauncher:
        """The split variant's forward without the combine (`_run_partials`), for any split count."""
        problem = plan.problem
        if problem.max_seqlen_q == 0 or problem.total_q == 0:
            def empty(plan, args):  # no query rows: nothing to launch
                (total_q, hq, d), dev = args.q.shape, args.q.device
                return (torch.zeros(1, total_q, hq, d, dtype=torch.float32, device=dev),
                        torch.full((1, hq, total_q), float("-inf"), dtype=torch.float32, device=dev))

            return PartialLauncher(plan, (), empty)
        ok, why = plan.config.with_split(True).can_implement()
        if not ok:
            raise KernelUnavailableError(f"fa512: {self.name} has no split variant for this call: {why}")
        state = launch_state(plan, args, None, partials=True)
        return PartialLauncher(plan, (), lambda plan, args: _run_partials(state, args))

    def launch(self, plan, args: FwdArgs, out: torch.Tensor, config=None, trace_addr: int = 0) -> torch.Tensor:
        """One launch outside the memo: ``config`` overrides ``plan.config`` (A/B profiling,
        diagnostic stages); ``trace_addr`` is the device-visible address of a host-mapped int32
        buffer of `cute_kernels.diagnostics.TRACE_BUFFER_WORDS` words for ``config.trace`` variants
        (profiles/gpu_mma16_smoke.py --diag --trace), 0 otherwise."""
        if plan.problem.max_seqlen_q == 0 or args.q.shape[0] == 0:
            q = args.q
            return torch.full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float32, device=q.device)
        state = launch_state(plan, args, out, config, trace_addr)
        return _run(state, args.q, args.k, args.v, out, args.cu_seqlens_q, args.cu_seqlens_k, args.seqused_k,
                    args.page_table, args.q_descale, args.k_descale, args.v_descale)


class Fp8MmaBackend(Mma16Backend):
    """The SM90 FP8-MMA kernel (same pipeline as mma16, `Sm90FwdConfig.mma_path="fp8_mma"`): an
    e4m3 KV cache MMA'd as e4m3 (QGMMA) for QK^T and P.V, Q quantised in-kernel per row."""

    name = "fp8_mma"
    fp8_mma = True

    def unsupported(self, problem: Problem, target) -> Optional[str]:
        if not problem.kv_is_fp8:
            return f"needs an fp8 e4m3 KV cache, got {problem.kv_dtype} (bf16/fp16 KV: mma16)"
        refusal = super().unsupported(problem, target)
        if refusal is None and problem.precision == "accurate":
            from cute_kernels.variants import QK_ROWS_MAX_QUERY_ROWS

            config = self.make_config(problem, target)
            if not config.two_term:
                refusal = ("precision='accurate' is built for decode tiles only (layout 'decode': at most "
                           f"{QK_ROWS_MAX_QUERY_ROWS} packed query rows per kv head, tile_n 64: page sizes a multiple "
                           f"of 64); this call plans layout {config.layout!r} at tile_n {config.tile_n} (the other "
                           "kernels are accurate by construction)")
        return refusal


__all__ = ["CuteLauncher", "Fp8MmaBackend", "LaunchState", "Mma16Backend", "WINDOW_INF", "kernel_specs",
           "forward_config", "launch_state", "mask_kind", "split_counters", "vt_scratch_shape"]
