"""``python -m fa512 bench``: kernel speed next to ceilings measured in the same run (GPU only).

Order of work:

1. Ceilings, on this GPU now: bf16 GEMM 8192^3 (``torch.matmul``), e4m3 GEMM 8192^3
   (``torch._scaled_mm``, fast accumulation; the precise-accumulation rate is reported too) and
   device-to-device copy bandwidth (bytes read + bytes written). Every point also times its
   GEMM ceiling and the copy right before and right after itself, and its fractions are of the
   mean of those: the H200 clocks down under sustained load, so a ceiling timed at another
   moment is another machine. Kernels and ceilings get the same budget (`rep_budget`: 0.1 s
   of warm-up, then the median of 0.2 s (``--quick``) or 0.4 s of calls).
2. Each kernel variant that can serve a point (fp8_mma; mma16 on fp8 and on bf16 KV; triton on
   both), on the grid (`fa512.tools.bench_grid`): prefill 2k/8k/16k/32k causal and local
   (window 1024) and 8 x 1k causal, chunked prefill (2k over 8k, 16k, 32k and 128k; 8k over
   32k; B=4 x 512 over 8k), decode B in {1, 4, 16, 64, 128} x seqused_k in {2k, 8k, 32k, 128k};
   Gemma-4 31B heads by default. Eager calls and CUDA-graph replay, each the median of many reps
   after warm-up, timed with CUDA events, over several fresh random input sets used in turn so
   that the device's L2 cache cannot hold the working set of small decode points. Points whose
   inputs do not fit in free memory are skipped (bytes are estimated before anything is
   allocated).
3. The latency cases (mode ``latency``, issue 22): decode B=1 x 8k (32/4 heads; fp8_mma,
   mma16 on bf16 KV, triton), MTP (4 causal queries a sequence) B=1 and B=32 x 28k (8/1),
   decode B=8 x 8k (8/1) and the seqused_k=64 floor (32/4), fp8 KV paged by 64 with descales.
   Each is timed as one CUDA graph holding one call per input set (`GraphTimer`), with enough
   sets that they cover 2 x 60 MiB of L2 (`bench_grid.latency_sets`: 384 for the floor), and
   reported in us per call next to the L2-cold copy of the same bytes (read + write) timed right
   before and after, with %copy = copy time / kernel time, the kernel that ran, its split count
   and the CTAs its forward launched (`fa512.Plan.ctas`).
4. Host launch overhead per op call (enqueue time of back-to-back calls) and first-call latency
   in a fresh process with a cold and then a warm compile cache (``FA512_CACHE_DIR``).

Work counted: FLOPs = 4 * 512 * Hq * (visible query-key pairs) (QK and PV, causal/local masks
counted exactly); bytes = Q + K/V of every key some query can see (in the cache dtype) + O,
each once. Fractions: TFLOP/s over the GEMM ceiling of the kernel's MMA type (fp8 for fp8_mma,
bf16 otherwise), GB/s over the copy bandwidth, and ``roof``: achieved FLOP/s over the roofline
min(GEMM ceiling, intensity x copy bandwidth), naming the bound. Writes bench.json (grid rows
under "rows", latency rows under "latency") and bench_roofline.png into ``--out``. On a machine
without a CUDA GPU it refuses (exit code 2); ``--list`` (old name ``--dry-run``) prints the
grid and the latency cases with their work counts and memory estimates anywhere.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from typing import Optional

import torch

from .ab import kernel_refusal
from .bench_grid import (  # noqa: F401 - keys_read, visible_pairs: re-exported for callers of this module
    KV_DTYPES,
    LATENCY_CASES,
    LATENCY_L2_BYTES,
    LATENCY_PAGE_SIZE,
    MEMORY_FRACTION,
    MODES,
    OPT_IN_VARIANTS,
    VARIANTS,
    LatencyCase,
    Point,
    bench_grid,
    format_list,
    input_set_bytes,
    keys_read,
    latency_cases,
    latency_sets,
    rotation_sets,
    variant_precision,
    visible_pairs,
    work,
)

GEMM_N = 8192
MIN_GRAPH_CALLS = 16  # calls per latency graph at least: one replay's launch cost spread over them


def roofline(flops: float, nbytes: float, seconds: float, peak_flops: float, bandwidth: float) -> dict:
    """Achieved rates and fractions of the compute, memory and roofline ceilings."""
    rate = flops / seconds
    gbs = nbytes / seconds
    intensity = flops / max(1.0, nbytes)
    attainable = min(peak_flops, intensity * bandwidth)
    return {
        "tflops": rate / 1e12,
        "gbs": gbs / 1e9,
        "frac_compute": rate / peak_flops,
        "frac_bandwidth": gbs / bandwidth,
        "frac_roofline": rate / attainable,
        "bound": "compute" if peak_flops <= intensity * bandwidth else "memory",
    }


# -- measurement (CUDA) --------------------------------------------------------------------


def event_times(calls, reps: int) -> list:
    """Milliseconds of each of ``reps`` calls (rotating through ``calls``), CUDA events."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        calls[i % len(calls)]()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _median(xs: list) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def _exception_line(exc: BaseException, limit: Optional[int] = None) -> str:
    """'<type>: <first line of the message>' (the message cut to ``limit`` characters)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:limit] if text else ''}"


def _failure_status(exc: BaseException) -> str:
    """A point's status when its measurement raised: skipped when out of memory, else an error."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return f"skipped: out of memory ({str(exc).splitlines()[0][:80]})"
    return f"error: {_exception_line(exc, 160)}"


def time_calls(calls, warmup: int, target_ms: float, min_reps: int, max_reps: int, warmup_ms: float = 0.0) -> dict:
    """Warm up (``warmup`` calls, then ``warmup_ms`` of calls), size the rep count from a probe,
    then the median per-call time in ms."""
    for i in range(max(warmup, len(calls))):
        calls[i % len(calls)]()
    torch.cuda.synchronize()
    probe = _median(event_times(calls, 3))
    for i in range(min(max_reps, int(warmup_ms / max(probe, 1e-3)))):
        calls[i % len(calls)]()
    reps = int(min(max_reps, max(min_reps, target_ms / max(probe, 1e-3))))
    times = event_times(calls, reps)
    return {"ms": _median(times), "min_ms": min(times), "reps": reps}


def rep_budget(quick: bool) -> dict:
    """The `time_calls` budget of every timing, kernels and ceilings alike: the H200 clocks down
    within tens of milliseconds of sustained load (docs/sm90_kernel.md, "Timing"), so a kernel
    and its ceiling are only comparable after the same stretch of load."""
    return dict(warmup=5, warmup_ms=100.0, target_ms=200.0 if quick else 400.0, min_reps=10, max_reps=4000)


def capture_graph(fn):
    """A CUDA graph of one call of ``fn`` (warmed up on a side stream first, as torch requires)."""
    return capture_sequence([fn], warmups=2)


def capture_sequence(fns, warmups: int = 1):
    """A CUDA graph calling each of ``fns`` once, in order (each warmed up on a side stream first)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmups):
            for fn in fns:
                fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in fns:
            fn()
    return graph


def _rate(ms: float, flops: float) -> float:
    return flops / (ms * 1e-3) / 1e12


class CeilingTimer:
    """The ceilings, timed whenever asked with `rep_budget`: bf16 and e4m3 GEMM 8192^3 and the
    device-to-device copy (bytes read + written). Operands are made once and kept."""

    def __init__(self, device, quick: bool, copy_bytes: int):
        self.device, self.reps, self.copy_bytes = device, rep_budget(quick), copy_bytes
        self._ops: dict = {}

    def _operands(self, kind: str):
        if kind not in self._ops:
            n, dev = GEMM_N, self.device
            if kind == "bf16":
                self._ops[kind] = tuple(torch.randn(n, n, device=dev, dtype=torch.bfloat16) for _ in range(3))
            elif kind == "fp8":  # B column-major, as _scaled_mm requires
                a = torch.randn(n, n, device=dev, dtype=torch.bfloat16).to(torch.float8_e4m3fn)
                b = torch.randn(n, n, device=dev, dtype=torch.bfloat16).to(torch.float8_e4m3fn).t()
                self._ops[kind] = (a, b, torch.ones((), device=dev, dtype=torch.float32))
            else:
                src = torch.empty(self.copy_bytes, dtype=torch.uint8, device=dev)
                self._ops[kind] = (src, torch.empty_like(src))
        return self._ops[kind]

    def bf16_gemm(self) -> dict:
        a, b, c = self._operands("bf16")
        t = time_calls([lambda: torch.matmul(a, b, out=c)], **self.reps)
        return {"ms": t["ms"], "tflops": _rate(t["ms"], 2 * GEMM_N**3), "shape": [GEMM_N] * 3}

    def fp8_gemm(self, fast: bool = True) -> dict:
        a, b, one = self._operands("fp8")

        def call():
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast)

        try:
            t = time_calls([call], **self.reps)
        except (RuntimeError, TypeError) as exc:
            return {"error": str(exc).splitlines()[0]}
        return {"ms": t["ms"], "tflops": _rate(t["ms"], 2 * GEMM_N**3), "use_fast_accum": fast}

    def copy(self) -> dict:
        src, dst = self._operands("copy")
        t = time_calls([lambda: dst.copy_(src)], **self.reps)
        return {"ms": t["ms"], "gbs": 2 * self.copy_bytes / (t["ms"] * 1e-3) / 1e9, "bytes_each_way": self.copy_bytes}

    def around(self, peak_key: str) -> dict:
        """(GEMM TFLOP/s of ``peak_key``, copy GB/s) timed now."""
        gemm = self.fp8_gemm() if peak_key == "fp8_gemm" else self.bf16_gemm()
        return {"tflops": gemm.get("tflops"), "gbs": self.copy()["gbs"]}


def measure_ceilings(timer: CeilingTimer) -> dict:
    """bf16 and e4m3 GEMM at 8192^3 and device-to-device copy bandwidth, measured now."""
    return {
        "bf16_gemm": timer.bf16_gemm(),
        "fp8_gemm": timer.fp8_gemm(fast=True),
        "fp8_gemm_precise": timer.fp8_gemm(fast=False),
        "copy": timer.copy(),
    }


# ``--kernel`` of the latency profiles (profiles/split_breakdown.py, latency_kernels.py,
# kernel_timeline.py): the kernel and the KV dtype of its inputs
PROFILE_KERNELS = {"fp8_mma": ("fp8_mma", "fp8"), "mma16": ("mma16", "fp8"), "mma16-bf16": ("mma16", "bf16")}


def profile_cases(names: str) -> list:
    """The profiles' case list: the latency cases whose names contain one of the comma-separated
    ``names`` (all when empty), then the prefill and chunked grid points named by a substring
    that starts with "prefill" or "chunked", with the 31B heads (32/4) as `LatencyCase`s (named
    e.g. "prefill 2k causal 32/4")."""
    wanted = [s for s in names.split(",") if s]
    cases = [c for c in LATENCY_CASES if not wanted or any(w in c.name for w in wanted)]
    grid_names = [w for w in wanted if w.startswith(("prefill", "chunked"))]
    grid = [LatencyCase(p, 32, 4) for p in bench_grid() if p.mode in ("prefill", "chunked")]
    return cases + [c for c in grid if any(w in c.name for w in grid_names)]


def profile_latency_inputs(names: str, kv: str, device, seed: int = 100):
    """For each of `profile_cases` (``names``): (case, its `work`, input sets rotated so the L2
    is cold, as `bench_latency` times them), one case at a time."""
    l2 = max(torch.cuda.get_device_properties(device).L2_cache_size, 60 << 20)
    for case in profile_cases(names):
        w = work(case.point, case.hq, case.hkv, KV_DTYPES[kv].itemsize)
        yield case, w, [_make_set(case.point, case.heads, kv, seed + i, device) for i in range(latency_sets(w["bytes"], l2))]


def _make_set(point: Point, heads: str, kv: str, seed: int, device):
    from .inputs import make_bench_case

    case = make_bench_case(
        heads=heads, q_lens=[point.q_len] * point.batch, k_lens=[point.seqlen_k] * point.batch,
        causal=point.causal, window_left=point.window_left, kv_dtype=KV_DTYPES[kv], seed=seed, device=device,
    )
    return case, torch.empty_like(case.q)


def bench_point(point: Point, variant: tuple, heads: str, device, ceilings: dict, timer: CeilingTimer, seed: int) -> dict:
    """Eager and graph timings of one variant at one point, or the reason it was skipped."""
    import gc

    import fa512
    from .inputs import resolve_heads

    label, kernel, kv = variant
    prec = variant_precision(label)
    hq, hkv = resolve_heads(heads)
    kv_bytes = KV_DTYPES[kv].itemsize
    row = {"point": point.name, **asdict(point), "variant": label, "kernel": kernel, "kv": kv, "heads": heads}
    # Ask on a small problem of the same kind first: a kernel that is not built, or does not
    # take this KV dtype or mask, is skipped before gigabytes of inputs are made for it.
    probe, _ = _make_set(Point(point.mode, 1, min(point.q_len, 128), min(point.seqlen_k, 256), point.causal, point.window_left), heads, kv, seed, device)
    why = kernel_refusal(probe, kernel, prec)
    del probe
    if why is not None:
        row["status"] = f"not available: {why}"
        return row
    gc.collect()
    torch.cuda.empty_cache()  # the previous point's inputs are gone; give their memory back
    set_bytes = input_set_bytes(point, hq, hkv, kv_bytes)
    free, _ = torch.cuda.mem_get_info(device)
    if set_bytes > MEMORY_FRACTION * free:
        row["status"] = f"skipped: needs {set_bytes / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
        return row
    n_sets = rotation_sets(set_bytes, torch.cuda.get_device_properties(device).L2_cache_size, free)
    try:
        sets = [_make_set(point, heads, kv, seed + i, device) for i in range(n_sets)]
        first = sets[0][0]
        why = kernel_refusal(first, kernel, prec)
        if why is not None:
            row["status"] = f"not available: {why}"
            return row
        plan = fa512.plan(first.q, first.k, first.v, **first.kwargs(), kernel=kernel, precision=prec)
        row.update(num_splits=plan.num_splits, precision=plan.precision)  # the numerics that run
        calls = [(lambda c=c, o=o: fa512.attention(c.q, c.k, c.v, **c.kwargs(), out=o, kernel=kernel, precision=prec)) for c, o in sets]
        reps = timer.reps
        peak_key = "fp8_gemm" if kernel == "fp8_mma" else "bf16_gemm"
        before = timer.around(peak_key)
        eager = time_calls(calls, **reps)
        row.update(status="ok", n_sets=n_sets, set_bytes=set_bytes, eager_ms=eager["ms"], eager_reps=eager["reps"])
        try:
            graphs = [capture_graph(fn) for fn in calls]
            graph = time_calls([g.replay for g in graphs], **reps)
            row.update(graph_ms=graph["ms"], graph_reps=graph["reps"])
        except Exception as exc:  # a kernel that cannot be captured is reported, not fatal
            row["graph_error"] = _exception_line(exc)
        after = timer.around(peak_key)
    except Exception as exc:  # a failing kernel is reported in the table; the grid goes on
        row["status"] = _failure_status(exc)
        return row
    w = work(point, hq, hkv, kv_bytes)
    # fractions of the ceilings timed around this point (the mean of before and after); the
    # run's first ceilings stand in for a GEMM that failed to run now
    first_peak = ceilings.get(peak_key, {}).get("tflops") or ceilings["bf16_gemm"]["tflops"]
    peaks = [x["tflops"] for x in (before, after) if x.get("tflops")]
    peak = sum(peaks) / len(peaks) if peaks else first_peak
    bw = (before["gbs"] + after["gbs"]) / 2
    row.update(flops=w["flops"], bytes=w["bytes"], intensity=w["intensity"], ceiling=peak_key,
               ceiling_tflops=peak, ceiling_tflops_around=[before.get("tflops"), after.get("tflops")],
               copy_gbs=bw, copy_gbs_around=[before["gbs"], after["gbs"]])
    for tag in ("eager", "graph"):
        ms = row.get(f"{tag}_ms")
        if ms is not None:
            r = roofline(w["flops"], w["bytes"], ms * 1e-3, peak * 1e12, bw * 1e9)
            row.update({f"{tag}_{k}": v for k, v in r.items()})
    row["best_ms"] = min(row.get("graph_ms", math.inf), row["eager_ms"])
    return row


# -- latency cases (CUDA) ------------------------------------------------------------------


class GraphTimer:
    """Per-call time of a list of calls replayed as one CUDA graph: each call once per replay, in
    order, the list repeated to at least MIN_GRAPH_CALLS calls. One graph launch and the CUDA
    events around it are spread over many calls, so a kernel shorter than the host's cost of
    launching a graph is not timed at that cost; the gaps between kernels inside the graph
    (what a decode step's graph pays too) are counted."""

    def __init__(self, fns: list, reps: dict):
        seq = list(fns) * -(-MIN_GRAPH_CALLS // len(fns))
        self.graph, self.calls, self.reps = capture_sequence(seq), len(seq), reps
        # The graph replays the captured addresses: keep every tensor the calls hold alive (the
        # copy's buffers exist only in these closures; freed, a replay writes freed memory).
        self.fns = seq

    def time(self) -> dict:
        t = time_calls([self.graph.replay], **self.reps)
        return {"us": 1e3 * t["ms"] / self.calls, "min_us": 1e3 * t["min_ms"] / self.calls, "replays": t["reps"]}


def copy_timer(nbytes: int, n_sets: int, device, reps: dict) -> GraphTimer:
    """Device copies moving ``nbytes`` in all (nbytes / 2 read + nbytes / 2 written) each, over
    ``n_sets`` buffer pairs in turn: the L2-cold copy of the same bytes as a latency case."""
    half = max(1, nbytes // 2)
    pairs = [(torch.empty(half, dtype=torch.uint8, device=device), torch.empty(half, dtype=torch.uint8, device=device))
             for _ in range(n_sets)]
    return GraphTimer([(lambda s=s, d=d: d.copy_(s)) for s, d in pairs], reps)


def bench_latency(case: LatencyCase, variant: tuple, device, reps: dict, l2_bytes: int, seed: int) -> dict:
    """One latency row: us per call by graph replay with the L2 cold, the copy of the same bytes
    timed right before and after (their mean), %copy = copy time / kernel time, the kernel that
    ran, its split count and CTAs."""
    import gc

    import fa512
    from ..launch.run import last_launch

    label, kernel, kv = variant
    prec = variant_precision(label)
    kv_bytes = KV_DTYPES[kv].itemsize
    w = work(case.point, case.hq, case.hkv, kv_bytes)
    row = {"case": case.name, **asdict(case.point), "hq": case.hq, "hkv": case.hkv, "variant": label,
           "kernel": kernel, "kv": kv, "bytes": w["bytes"], "flops": w["flops"]}
    gc.collect()
    torch.cuda.empty_cache()  # the previous row's inputs are gone; give their memory back
    n_sets = latency_sets(w["bytes"], l2_bytes)
    set_bytes = input_set_bytes(case.point, case.hq, case.hkv, kv_bytes, LATENCY_PAGE_SIZE)
    free, _ = torch.cuda.mem_get_info(device)
    need = n_sets * (set_bytes + w["bytes"])  # the input sets and the copy's buffers
    if need > MEMORY_FRACTION * free:
        row["status"] = f"skipped: needs {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
        return row
    try:
        sets = [_make_set(case.point, case.heads, kv, seed + i, device) for i in range(n_sets)]
        first, first_out = sets[0]
        why = kernel_refusal(first, kernel, prec)
        if why is not None:
            row["status"] = f"not available: {why}"
            return row
        ctas = fa512.plan(first.q, first.k, first.v, **first.kwargs(), kernel=kernel, precision=prec).ctas
        last_launch.clear()
        fa512.attention(first.q, first.k, first.v, **first.kwargs(), out=first_out, kernel=kernel, precision=prec)
        torch.cuda.synchronize()
        ran = dict(last_launch)
        row.update(ran=ran.get("kernel"), num_splits=ran.get("num_splits"), ctas=ctas,
                   n_sets=n_sets, rotated_bytes=n_sets * w["bytes"], set_bytes=set_bytes, l2_bytes=l2_bytes)
        if row["ran"] != kernel:  # an explicit kernel never falls back; say so if it did
            row["status"] = f"error: asked for {kernel}, {row['ran']} ran"
            return row
        calls = [(lambda c=c, o=o: fa512.attention(c.q, c.k, c.v, **c.kwargs(), out=o, kernel=kernel, precision=prec)) for c, o in sets]
        copy = copy_timer(w["bytes"], n_sets, device, reps)
        kernel_graph = GraphTimer(calls, reps)
        before = copy.time()
        t = kernel_graph.time()
        after = copy.time()
    except Exception as exc:  # a failing kernel is reported in the table; the cases go on
        row["status"] = _failure_status(exc)
        return row
    copy_us = (before["us"] + after["us"]) / 2
    row.update(status="ok", us=t["us"], min_us=t["min_us"], replays=t["replays"], calls_per_graph=kernel_graph.calls,
               copy_us=copy_us, copy_us_around=[before["us"], after["us"]], pct_copy=100 * copy_us / t["us"],
               gbs=w["bytes"] / (t["us"] * 1e-6) / 1e9)
    return row


def host_overhead(variant: tuple, heads: str, device, n: int = 200) -> dict:
    """Host time per op call: back-to-back calls enqueued without a sync, decode B=1 k=2048."""
    import fa512

    label, kernel, kv = variant
    prec = variant_precision(label)
    case, out = _make_set(Point("decode", 1, 1, 2048), heads, kv, 0, device)
    if kernel_refusal(case, kernel, prec) is not None:
        return {}
    call = lambda: fa512.attention(case.q, case.k, case.v, **case.kwargs(), out=out, kernel=kernel, precision=prec)  # noqa: E731
    for _ in range(10):
        call()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    return {"host_us_per_call": host / n * 1e6, "calls": n}


def first_call_latency(variant: tuple, heads: str, timeout: float = 600.0) -> dict:
    """First-call time in a fresh process with a cold, then a warm, FA512_CACHE_DIR."""
    label = variant[0]
    res = {}
    with tempfile.TemporaryDirectory(prefix="fa512-cache-") as cache:
        env = {**os.environ, "FA512_CACHE_DIR": cache}
        for tag in ("cold", "warm"):
            cmd = [sys.executable, "-m", "fa512.tools.bench", "--first-call", label, "--heads", heads]
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                res[tag] = {"error": f"timed out after {timeout:.0f} s"}
                continue
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("FIRST_CALL ")), None)
            if proc.returncode != 0 or line is None:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                res[tag] = {"error": f"exit {proc.returncode}: {tail[0][:200]}"}
            else:
                res[tag] = json.loads(line[len("FIRST_CALL ") :])
    return res


def _first_call_child(label: str, heads: str) -> int:
    """Child of `first_call_latency`: time the first and second call of one variant, print JSON."""
    import fa512

    variant = next(v for v in VARIANTS + OPT_IN_VARIANTS if v[0] == label)
    _, kernel, kv = variant
    prec = variant_precision(label)
    device = torch.device("cuda")
    torch.cuda.init()
    case, out = _make_set(Point("decode", 1, 1, 2048), heads, kv, 0, device)
    torch.cuda.synchronize()
    why = kernel_refusal(case, kernel, prec)
    if why is not None:
        print("FIRST_CALL " + json.dumps({"status": f"not available: {why}"}))
        return 0
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        fa512.attention(case.q, case.k, case.v, **case.kwargs(), out=out, kernel=kernel, precision=prec)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    print("FIRST_CALL " + json.dumps({"first_s": times[0], "second_s": times[1]}))
    return 0


# -- reporting -----------------------------------------------------------------------------


def format_table(rows: list, ceilings: dict, header: str) -> str:
    lines = [header, "ceilings at the start of the run (each row's fractions are of the ceilings timed right before"
             " and after it, the same way: its own GEMM rate and copy bandwidth are in bench.json):"]
    for key, c in ceilings.items():
        if "error" in c:
            lines.append(f"   {key:18s} failed: {c['error']}")
        elif "tflops" in c:
            lines.append(f"   {key:18s} {c['tflops']:8.1f} TFLOP/s  ({c['ms']:.3f} ms for 8192^3)")
        else:
            lines.append(f"   {key:18s} {c['gbs']:8.1f} GB/s     (read + write)")
    lines.append(
        f"{'variant':15s} {'point':28s} {'eager ms':>9s} {'graph ms':>9s} {'TFLOP/s':>8s} {'GB/s':>8s} "
        f"{'%GEMM':>6s} {'%copy':>6s} {'%roof':>6s} {'bound':7s} {'splits':>6s} {'sets':>4s}"
    )
    for r in rows:
        if r.get("status") != "ok":
            lines.append(f"{r['variant']:15s} {r['point']:28s} {r.get('status', '')}")
            continue
        tag = "graph" if "graph_ms" in r else "eager"
        lines.append(
            f"{r['variant']:15s} {r['point']:28s} {r['eager_ms']:9.3f} {r.get('graph_ms', float('nan')):9.3f} "
            f"{r[f'{tag}_tflops']:8.1f} {r[f'{tag}_gbs']:8.0f} {100 * r[f'{tag}_frac_compute']:6.1f} "
            f"{100 * r[f'{tag}_frac_bandwidth']:6.1f} {100 * r[f'{tag}_frac_roofline']:6.1f} {r[f'{tag}_bound']:7s} "
            f"{r.get('num_splits', '-'):>6} {r.get('n_sets', '-'):>4}"
            + (f"  graph: {r['graph_error']}" if "graph_error" in r else "")
        )
    return "\n".join(lines)


def format_latency(rows: list) -> str:
    """The latency section: one line per (case, variant)."""
    lines = [
        "latency: us per call by CUDA-graph replay with the L2 cold (input sets rotated, `sets`), next to the "
        "device copy of the same bytes (read + write, L2 cold too) timed right before and after; "
        "%copy = copy time / kernel time",
        f"{'case':28s} {'variant':14s} {'ran':9s} {'splits':>6s} {'CTAs':>5s} {'bytes':>10s} {'sets':>5s} "
        f"{'us/call':>8s} {'copy us':>8s} {'%copy':>6s}",
    ]
    for r in rows:
        if r.get("status") != "ok":
            lines.append(f"{r['case']:28s} {r['variant']:14s} {r.get('status', '')}")
            continue
        lines.append(
            f"{r['case']:28s} {r['variant']:14s} {r['ran']:9s} {str(r.get('num_splits')):>6s} {r['ctas']:>5} {r['bytes']:10d} "
            f"{r['n_sets']:>5} {r['us']:8.2f} {r['copy_us']:8.2f} {r['pct_copy']:6.1f}"
        )
    return "\n".join(lines)


def make_plot(rows: list, ceilings: dict, path: str) -> str:
    """Roofline-style PNG: achieved TFLOP/s vs arithmetic intensity with the measured roofs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.get("status") == "ok"]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    bw = ceilings["copy"]["gbs"] * 1e9
    xs = [10 ** (i / 20) for i in range(0, 101)]  # intensity 1 .. 1e5 FLOP/byte
    for key, style in (("bf16_gemm", "-"), ("fp8_gemm", "--")):
        peak = ceilings.get(key, {}).get("tflops")
        if peak:
            ax.plot(xs, [min(peak, x * bw / 1e12) for x in xs], "k" + style, lw=1, label=f"roof: {key} {peak:.0f} TFLOP/s, copy {bw / 1e9:.0f} GB/s")
    markers = {"eager": "o", "graph": "x"}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, label in enumerate(sorted({r["variant"] for r in ok})):
        for tag, marker in markers.items():
            pts = [(r["intensity"], r[f"{tag}_tflops"]) for r in ok if r["variant"] == label and f"{tag}_tflops" in r]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=colors[i % len(colors)], label=f"{label} ({tag})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of Q + K/V + O)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title("fa512 bench: kernels against ceilings measured in the same run", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- CLI -----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a few representative points and fewer reps")
    parser.add_argument("--out", default=os.path.join("out", "bench"), help="directory for bench.json and the plot (default out/bench)")
    parser.add_argument("--json", default=None, help="JSON file to write (default OUT/bench.json)")
    parser.add_argument("--heads", default="31B", help="Gemma-4 heads: 31B, 26B-A4B, E2B or Hq/Hkv (default 31B)")
    parser.add_argument("--kernels", default=",".join(v[0] for v in VARIANTS), help="comma list of variants (default all of "
                        "VARIANTS; " + ", ".join(v[0] for v in OPT_IN_VARIANTS) + " only when named)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma list of grid modes from {', '.join(MODES)} (default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-first-call", action="store_true", help="skip the fresh-process first-call latency runs")
    parser.add_argument("--list", "--dry-run", dest="list", action="store_true",
                        help="print the grid and the latency cases with work counts and memory estimates, measure nothing "
                             "(any machine; --dry-run is the old name)")
    parser.add_argument("--first-call", default=None, help=argparse.SUPPRESS)


def _selected(args) -> tuple:
    from .inputs import resolve_heads

    hq, hkv = resolve_heads(args.heads)
    wanted = [k for k in args.kernels.split(",") if k]
    known = [v[0] for v in VARIANTS + OPT_IN_VARIANTS]
    bad = [k for k in wanted if k not in known]
    if bad:
        raise ValueError(f"fa512 bench: --kernels: got {bad}, expected names from {', '.join(known)}")
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in MODES for m in modes):
        raise ValueError(f"fa512 bench: --modes: got {modes}, expected names from {', '.join(MODES)}")
    variants = [v for v in VARIANTS + OPT_IN_VARIANTS if v[0] in wanted]
    points = [p for p in bench_grid(args.quick) if p.mode in modes]
    cases = latency_cases(args.quick) if "latency" in modes else []
    return hq, hkv, variants, points, cases


def list_grid(args) -> int:
    """``--list``: the grid and the latency cases, with work counts and memory estimates."""
    hq, hkv, variants, points, cases = _selected(args)
    print(format_list(points, variants, cases, hq, hkv, args.heads))
    return 0


def main(args: argparse.Namespace) -> int:
    try:
        if args.first_call:
            return _first_call_child(args.first_call, args.heads)
        if args.list:
            return list_grid(args)
        hq, hkv, variants, points, cases = _selected(args)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(
            "fa512 bench: refusing to run: it needs a CUDA GPU, and torch.cuda.is_available() is False here "
            f"(torch {torch.__version__}). Nothing was measured.\n"
            "  Use `python -m fa512 bench --list` to list the grid with its FLOP and byte counts, or "
            "`python -m fa512 ab --quick` for the CPU accuracy checks.",
            file=sys.stderr,
        )
        return 2
    from tqdm import tqdm

    import fa512
    from .ab import json_safe

    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    gpu = f"{props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB)"
    os.makedirs(args.out, exist_ok=True)
    t_start = time.perf_counter()
    print(f"fa512 bench: {gpu}; measuring ceilings first ...", file=sys.stderr)
    timer = CeilingTimer(device, args.quick, (1 << 30) if args.quick else (2 << 30))
    ceilings = measure_ceilings(timer)
    rows = []
    jobs = [(p, v) for p in points for v in variants]
    for i, (point, variant) in enumerate(tqdm(jobs, desc="fa512 bench", unit="run", disable=None, file=sys.stderr)):
        rows.append(bench_point(point, variant, args.heads, device, ceilings, timer, args.seed + 1000 * i))
    del timer
    torch.cuda.empty_cache()
    # The latency cases rotate against at least the H200's 60 MiB L2 (LATENCY_L2_BYTES), more on a larger one.
    l2_bytes = max(props.L2_cache_size, LATENCY_L2_BYTES)
    latency_jobs = [(c, v) for c in cases for v in variants if v[0] in c.variants]
    latency = [
        bench_latency(case, variant, device, rep_budget(args.quick), l2_bytes, args.seed + 1000 * (len(jobs) + i))
        for i, (case, variant) in enumerate(tqdm(latency_jobs, desc="fa512 bench latency", unit="run", disable=None, file=sys.stderr))
    ]
    torch.cuda.empty_cache()
    overhead = {v[0]: host_overhead(v, args.heads, device) for v in variants}
    first_call = {} if args.no_first_call else {v[0]: first_call_latency(v, args.heads) for v in variants}
    elapsed = time.perf_counter() - t_start

    header = f"== fa512 bench | {gpu} | heads {args.heads} (Hq={hq}, Hkv={hkv}) | torch {torch.__version__}"
    print(format_table(rows, ceilings, header))
    if latency:
        print(format_latency(latency))
    print("host launch overhead per op call (decode B=1 k=2k, enqueue only):")
    for label, o in overhead.items():
        print(f"   {label:15s} " + (f"{o['host_us_per_call']:.1f} us" if o else "not available"))
    if first_call:
        print("first-call latency in a fresh process (cold / warm FA512_CACHE_DIR):")
        for label, fc in first_call.items():
            parts = []
            for tag in ("cold", "warm"):
                x = fc.get(tag, {})
                parts.append(f"{tag} " + (f"{x['first_s']:.2f} s" if "first_s" in x else x.get("status", x.get("error", "?"))))
            print(f"   {label:15s} " + " / ".join(parts))

    json_path = args.json or os.path.join(args.out, "bench.json")
    plot = make_plot(rows, ceilings, os.path.join(args.out, "bench_roofline.png"))
    report = {
        "tool": "fa512 bench",
        "meta": {
            "gpu": gpu, "torch": torch.__version__, "fa512": fa512.__version__, "heads": args.heads,
            "quick": bool(args.quick), "time_s": elapsed, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
            "work_model": "FLOPs = 4*512*Hq*visible pairs; bytes = Q + K/V read (cache dtype) + O, once each",
        },
        "ceilings": ceilings,
        "rows": rows,
        "latency": latency,
        "host_overhead": overhead,
        "first_call": first_call,
        "plots": [plot],
    }
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w") as fh:
        json.dump(json_safe(report), fh, indent=1, default=str)
    print(f"\nwrote {json_path}\nwrote {plot}\n({len(jobs) + len(latency_jobs)} runs, {elapsed:.0f} s)")
    failed = [f"{r['variant']} @ {r['point']}" for r in rows if r.get("status", "").startswith("error")]
    failed += [f"{r['variant']} @ latency {r['case']}" for r in latency if r.get("status", "").startswith("error")]
    if failed:
        print("fa512 bench: runs that raised: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="python -m fa512 bench", description=__doc__.split("\n")[0])
    add_arguments(_parser)
    sys.exit(main(_parser.parse_args()))
