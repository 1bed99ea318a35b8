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
   both), on the grid: prefill 2k/8k/32k causal and local (window 1024), chunked prefill, decode
   B in {1, 4, 16, 64, 128} x seqused_k in {2k, 8k, 32k, 128k}; Gemma-4 31B heads by default.
   Eager calls and CUDA-graph replay, each the median of many reps after warm-up, timed with CUDA
   events, over several fresh random input sets used in turn so that the L2 cache (50 MB) cannot
   hold the working set of small decode points. Points whose inputs do not fit in free memory
   are skipped (bytes are estimated before anything is allocated).
3. Host launch overhead per op call (enqueue time of back-to-back calls) and first-call latency
   in a fresh process with a cold and then a warm compile cache (``FA512_CACHE_DIR``).

Work counted: FLOPs = 4 * 512 * Hq * (visible query-key pairs) (QK and PV, causal/local masks
counted exactly); bytes = Q + K/V of every key some query can see (in the cache dtype) + O,
each once. Fractions: TFLOP/s over the GEMM ceiling of the kernel's MMA type (fp8 for fp8_mma,
bf16 otherwise), GB/s over the copy bandwidth, and ``roof``: achieved FLOP/s over the roofline
min(GEMM ceiling, intensity x copy bandwidth), naming the bound. Writes bench.json and
bench_roofline.png into ``--out``. On a machine without a CUDA GPU it refuses (exit code 2);
``--dry-run`` lists the grid with its work counts and memory estimates anywhere.
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
from dataclasses import asdict, dataclass

import torch

from .ab import kernel_refusal

HEAD_DIM = 512
GEMM_N = 8192
LOCAL_WINDOW_LEFT = 1023  # Gemma's sliding window of 1024 keys, including the query's own
DECODE_BATCHES = (1, 4, 16, 64, 128)
DECODE_CONTEXTS = (2048, 8192, 32768, 131072)
PREFILL_LENGTHS = (2048, 8192, 32768)
CHUNKED = ((1, 8192, 2048), (1, 32768, 2048), (4, 8192, 512))  # (batch, context, chunk)
# (label, kernel, kv dtype)
VARIANTS = (
    ("fp8_mma", "fp8_mma", "fp8"),
    ("mma16[fp8kv]", "mma16", "fp8"),
    ("mma16[bf16kv]", "mma16", "bf16"),
    ("triton[fp8kv]", "triton", "fp8"),
    ("triton[bf16kv]", "triton", "bf16"),
)
KV_DTYPES = {"fp8": torch.float8_e4m3fn, "bf16": torch.bfloat16}
MAX_SETS = 32  # input sets rotated per point
ROTATE_FACTOR = 4  # rotated inputs should cover this many L2 caches
MEMORY_FRACTION = 0.8  # of free memory that inputs may take


@dataclass(frozen=True)
class Point:
    """One grid point: per-sequence query/key lengths and the mask."""

    mode: str  # "prefill" | "chunked" | "decode"
    batch: int
    q_len: int
    seqlen_k: int
    causal: bool = True
    window_left: int = -1

    @property
    def name(self) -> str:
        k = _k(self.seqlen_k)
        mask = "local" if self.window_left >= 0 else ("causal" if self.causal else "full")
        if self.mode == "prefill":
            return f"prefill {k} {mask}"
        if self.mode == "chunked":
            return f"chunked B={self.batch} k={k} q={_k(self.q_len)} {mask}"
        return f"decode B={self.batch} k={k}"


def _k(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def bench_grid(quick: bool = False) -> list:
    """The grid of issue 6; ``quick`` keeps a handful of representative points."""
    if quick:
        return [
            Point("prefill", 1, 8192, 8192),
            Point("prefill", 1, 8192, 8192, window_left=LOCAL_WINDOW_LEFT),
            Point("chunked", 1, 2048, 8192),
            Point("decode", 1, 1, 8192),
            Point("decode", 4, 1, 32768),
            Point("decode", 64, 1, 8192),
        ]
    points = []
    for n in PREFILL_LENGTHS:
        points.append(Point("prefill", 1, n, n))
        points.append(Point("prefill", 1, n, n, window_left=LOCAL_WINDOW_LEFT))
    for batch, ctx, chunk in CHUNKED:
        points.append(Point("chunked", batch, chunk, ctx))
    for batch in DECODE_BATCHES:
        for ctx in DECODE_CONTEXTS:
            points.append(Point("decode", batch, 1, ctx))
    return points


# -- work and memory model -----------------------------------------------------------------


def visible_pairs(q_len: int, k_len: int, causal: bool, window_left: int = -1, window_right: int = -1) -> int:
    """Visible (query, key) pairs of one sequence, bottom-right aligned (the op's mask rule)."""
    if q_len <= 0 or k_len <= 0:
        return 0
    wr = 0 if causal else window_right
    pos = torch.arange(k_len - q_len, k_len, dtype=torch.int64)
    lo = (pos - window_left).clamp_min(0) if window_left >= 0 else torch.zeros_like(pos)
    hi = (pos + wr).clamp_max(k_len - 1) if wr >= 0 else torch.full_like(pos, k_len - 1)
    return int((hi - lo + 1).clamp_min(0).sum())


def keys_read(q_len: int, k_len: int, causal: bool, window_left: int = -1, window_right: int = -1) -> int:
    """Keys of one sequence that at least one query can see (what a kernel must read once)."""
    if q_len <= 0 or k_len <= 0:
        return 0
    wr = 0 if causal else window_right
    first_pos, last_pos = k_len - q_len, k_len - 1
    lo = max(0, first_pos - window_left) if window_left >= 0 else 0
    hi = min(k_len - 1, last_pos + wr) if wr >= 0 else k_len - 1
    return max(0, hi - lo + 1)


def work(point: Point, hq: int, hkv: int, kv_bytes: int, q_bytes: int = 2) -> dict:
    """FLOPs and bytes of one call: FLOPs 4*D*Hq per visible pair; bytes Q + K/V read + O."""
    pairs = point.batch * visible_pairs(point.q_len, point.seqlen_k, point.causal, point.window_left)
    keys = point.batch * keys_read(point.q_len, point.seqlen_k, point.causal, point.window_left)
    total_q = point.batch * point.q_len
    flops = 4 * HEAD_DIM * hq * pairs
    qo_bytes = 2 * total_q * hq * HEAD_DIM * q_bytes
    kv = 2 * keys * hkv * HEAD_DIM * kv_bytes
    return {"flops": flops, "bytes": qo_bytes + kv, "pairs": pairs, "intensity": flops / max(1, qo_bytes + kv)}


def input_set_bytes(point: Point, hq: int, hkv: int, kv_bytes: int, page_size: int = 64, max_splits: int = 32) -> int:
    """Device bytes of one input set: paged K/V, q, out, lse, metadata and a split workspace bound."""
    pages = point.batch * -(-point.seqlen_k // page_size)
    kv = 2 * pages * page_size * hkv * HEAD_DIM * kv_bytes
    total_q = point.batch * point.q_len
    q_out = 2 * total_q * hq * HEAD_DIM * 2
    lse = total_q * hq * 4
    # Split-KV partials (fp32 O + lse per split) only pay off for few query rows; bound them there.
    workspace = max_splits * total_q * hq * (HEAD_DIM + 1) * 4 if total_q <= 4096 else 0
    return kv + q_out + lse + workspace + pages * 4 + 64 * point.batch


def rotation_sets(set_bytes: int, l2_bytes: int, free_bytes: int) -> int:
    """How many input sets to rotate: enough to cover ROTATE_FACTOR L2 caches, within memory."""
    n = max(1, min(MAX_SETS, -(-ROTATE_FACTOR * l2_bytes // max(1, set_bytes))))
    while n > 1 and n * set_bytes > MEMORY_FRACTION * free_bytes:
        n -= 1
    return n


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
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
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
    hq, hkv = resolve_heads(heads)
    kv_bytes = KV_DTYPES[kv].itemsize
    row = {"point": point.name, **asdict(point), "variant": label, "kernel": kernel, "kv": kv, "heads": heads}
    # Ask on a small problem of the same kind first: a kernel that is not built, or does not
    # take this KV dtype or mask, is skipped before gigabytes of inputs are made for it.
    probe, _ = _make_set(Point(point.mode, 1, min(point.q_len, 128), min(point.seqlen_k, 256), point.causal, point.window_left), heads, kv, seed, device)
    why = kernel_refusal(probe, kernel)
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
        why = kernel_refusal(first, kernel)
        if why is not None:
            row["status"] = f"not available: {why}"
            return row
        row["num_splits"] = fa512.plan(first.q, first.k, first.v, **first.kwargs(), kernel=kernel).num_splits
        calls = [(lambda c=c, o=o: fa512.attention(c.q, c.k, c.v, **c.kwargs(), out=o, kernel=kernel)) for c, o in sets]
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
            row["graph_error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        after = timer.around(peak_key)
    except torch.cuda.OutOfMemoryError as exc:
        row["status"] = f"skipped: out of memory ({str(exc).splitlines()[0][:80]})"
        return row
    except Exception as exc:  # a failing kernel is reported in the table; the grid goes on
        row["status"] = f"error: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}"
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


def host_overhead(variant: tuple, heads: str, device, n: int = 200) -> dict:
    """Host time per op call: back-to-back calls enqueued without a sync, decode B=1 k=2048."""
    import fa512

    label, kernel, kv = variant
    case, out = _make_set(Point("decode", 1, 1, 2048), heads, kv, 0, device)
    if kernel_refusal(case, kernel) is not None:
        return {}
    call = lambda: fa512.attention(case.q, case.k, case.v, **case.kwargs(), out=out, kernel=kernel)  # noqa: E731
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

    variant = next(v for v in VARIANTS if v[0] == label)
    _, kernel, kv = variant
    device = torch.device("cuda")
    torch.cuda.init()
    case, out = _make_set(Point("decode", 1, 1, 2048), heads, kv, 0, device)
    torch.cuda.synchronize()
    why = kernel_refusal(case, kernel)
    if why is not None:
        print("FIRST_CALL " + json.dumps({"status": f"not available: {why}"}))
        return 0
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        fa512.attention(case.q, case.k, case.v, **case.kwargs(), out=out, kernel=kernel)
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
    parser.add_argument("--kernels", default=",".join(v[0] for v in VARIANTS), help="comma list of variants (default all)")
    parser.add_argument("--modes", default="prefill,chunked,decode", help="comma list of grid modes (default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-first-call", action="store_true", help="skip the fresh-process first-call latency runs")
    parser.add_argument("--dry-run", action="store_true", help="list the grid, work counts and memory estimates; measure nothing")
    parser.add_argument("--first-call", default=None, help=argparse.SUPPRESS)


def _selected(args) -> tuple:
    from .inputs import resolve_heads

    hq, hkv = resolve_heads(args.heads)
    wanted = [k for k in args.kernels.split(",") if k]
    known = [v[0] for v in VARIANTS]
    bad = [k for k in wanted if k not in known]
    if bad:
        raise ValueError(f"fa512 bench: --kernels: got {bad}, expected names from {', '.join(known)}")
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in ("prefill", "chunked", "decode") for m in modes):
        raise ValueError(f"fa512 bench: --modes: got {modes}, expected prefill, chunked, decode")
    points = [p for p in bench_grid(args.quick) if p.mode in modes]
    return hq, hkv, [v for v in VARIANTS if v[0] in wanted], points


def dry_run(args) -> int:
    hq, hkv, variants, points = _selected(args)
    print(f"fa512 bench --dry-run: {len(points)} points x {len(variants)} variants, heads {args.heads} (Hq={hq}, Hkv={hkv})")
    print(f"{'point':30s} {'kv':5s} {'GFLOP':>10s} {'MB moved':>10s} {'FLOP/B':>8s} {'set GiB':>8s}")
    for p in points:
        for kv in sorted({v[2] for v in variants}):
            w = work(p, hq, hkv, KV_DTYPES[kv].itemsize)
            sb = input_set_bytes(p, hq, hkv, KV_DTYPES[kv].itemsize)
            print(f"{p.name:30s} {kv:5s} {w['flops'] / 1e9:10.1f} {w['bytes'] / 1e6:10.1f} {w['intensity']:8.1f} {sb / 2**30:8.2f}")
    return 0


def main(args: argparse.Namespace) -> int:
    try:
        if args.first_call:
            return _first_call_child(args.first_call, args.heads)
        if args.dry_run:
            return dry_run(args)
        hq, hkv, variants, points = _selected(args)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(
            "fa512 bench: refusing to run: it needs a CUDA GPU, and torch.cuda.is_available() is False here "
            f"(torch {torch.__version__}). Nothing was measured.\n"
            "  Use `python -m fa512 bench --dry-run` to list the grid with its FLOP and byte counts, or "
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
    overhead = {v[0]: host_overhead(v, args.heads, device) for v in variants}
    first_call = {} if args.no_first_call else {v[0]: first_call_latency(v, args.heads) for v in variants}
    elapsed = time.perf_counter() - t_start

    header = f"== fa512 bench | {gpu} | heads {args.heads} (Hq={hq}, Hkv={hkv}) | torch {torch.__version__}"
    print(format_table(rows, ceilings, header))
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
        "host_overhead": overhead,
        "first_call": first_call,
        "plots": [plot],
    }
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w") as fh:
        json.dump(json_safe(report), fh, indent=1, default=str)
    print(f"\nwrote {json_path}\nwrote {plot}\n({len(jobs)} runs, {elapsed:.0f} s)")
    failed = [f"{r['variant']} @ {r['point']}" for r in rows if r.get("status", "").startswith("error")]
    if failed:
        print("fa512 bench: runs that raised: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="python -m fa512 bench", description=__doc__.split("\n")[0])
    add_arguments(_parser)
    sys.exit(main(_parser.parse_args()))
