"""What ``python -m fa512 bench`` measures, without measuring: the grid, the latency cases, the
work model (FLOPs and bytes of a call), the input-set rotation that keeps the L2 cache cold, and
``--list``, which prints all of it on any machine.

Two kinds of rows:

- **Grid points** (`Point`, modes prefill / chunked / decode): one shape per point, run with the
  global ``--heads`` for every kernel variant that plans, reported against the GEMM and copy
  ceilings (`fa512.tools.bench.bench_point`).
- **Latency cases** (`LatencyCase`, mode ``latency``): small decode and speculative-decoding
  (MTP, 4 causal query tokens per sequence) calls where the fixed cost of a launch and SM
  occupancy matter, each with its own heads and kernel variants, timed by CUDA-graph replay
  with the L2 cache cold, next to the copy of the same bytes (`fa512.tools.bench.bench_latency`).

Work model: FLOPs = 4 * 512 * Hq * (visible query-key pairs); bytes = Q + the K/V of every key
some query can see (in the cache dtype) + O, each once (`work`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

HEAD_DIM = 512
LOCAL_WINDOW_LEFT = 1023  # Gemma's sliding window of 1024 keys, including the query's own
DECODE_BATCHES = (1, 4, 16, 64, 128)
DECODE_CONTEXTS = (2048, 8192, 32768, 131072)
PREFILL_LENGTHS = (2048, 8192, 16384, 32768)
# (batch, context, chunk); issue 23's long-context chunks: 2k over 16k and 128k, 8k over 32k
CHUNKED = ((1, 8192, 2048), (1, 16384, 2048), (1, 32768, 2048), (1, 32768, 8192), (1, 131072, 2048), (4, 8192, 512))
SHORT_PREFILL_BATCH = (8, 1024)  # a batch of short prompts (issue 23: 8 x 1024, causal)
MODES = ("prefill", "chunked", "decode", "latency")
# (label, kernel, kv dtype)
VARIANTS = (
    ("fp8_mma", "fp8_mma", "fp8"),
    ("mma16[fp8kv]", "mma16", "fp8"),
    ("mma16[bf16kv]", "mma16", "bf16"),
    ("triton[fp8kv]", "triton", "fp8"),
    ("triton[bf16kv]", "triton", "bf16"),
)
# Run only when named in --kernels: fp8_mma's accurate mode (issue 24: "decode in accurate mode at
# the fast mode's speed" is read off its decode rows beside fp8_mma's)
OPT_IN_VARIANTS = (("fp8_mma[accurate]", "fp8_mma", "fp8"),)
VARIANT_PRECISION = {"fp8_mma[accurate]": "accurate"}  # label -> fa512.attention's precision
KV_DTYPES = {"fp8": torch.float8_e4m3fn, "bf16": torch.bfloat16}
MAX_SETS = 32  # input sets rotated per grid point
ROTATE_FACTOR = 4  # a grid point's rotated inputs should cover this many L2 caches
MEMORY_FRACTION = 0.8  # of free memory that inputs may take
# Latency cases rotate until their working sets cover LATENCY_L2_FACTOR L2 caches of at least
# LATENCY_L2_BYTES (the H200's 60 MiB; a GPU run takes the larger of this and the device's), with
# no cap on the set count: the seqused_k=64 floor moves 0.33 MB a call, so it rotates 384 sets.
LATENCY_L2_BYTES = 60 * 2**20
LATENCY_L2_FACTOR = 2
LATENCY_PAGE_SIZE = 64
PLAN_TARGET = "sm_90:132"  # what `--list` plans the latency cases for (an H200)


@dataclass(frozen=True)
class Point:
    """One call shape: per-sequence query/key lengths and the mask."""

    mode: str  # "prefill" | "chunked" | "decode" | "latency"
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
            return f"prefill {k} {mask}" if self.batch == 1 else f"prefill {self.batch} x {k} {mask}"
        if self.mode == "chunked":
            return f"chunked B={self.batch} k={k} q={_k(self.q_len)} {mask}"
        if self.mode == "latency" and self.q_len > 1:
            return f"MTP q={self.q_len} B={self.batch} k={k}"
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
    batch, n = SHORT_PREFILL_BATCH
    points.append(Point("prefill", batch, n, n))
    for batch, ctx, chunk in CHUNKED:
        points.append(Point("chunked", batch, chunk, ctx))
    for batch in DECODE_BATCHES:
        for ctx in DECODE_CONTEXTS:
            points.append(Point("decode", batch, 1, ctx))
    return points


# -- latency cases (issue 22) ----------------------------------------------------------------


@dataclass(frozen=True)
class LatencyCase:
    """A small call whose time is mostly fixed cost and SM occupancy: its shape, its own heads
    (not ``--heads``), the kernel variants it runs (labels of `VARIANTS`) and whether
    ``--quick`` keeps it. fp8 KV is paged (page 64) with (B, Hkv) descales; bf16 KV has none."""

    point: Point
    hq: int
    hkv: int
    variants: tuple = ("fp8_mma",)
    quick: bool = False
    note: str = ""

    @property
    def name(self) -> str:
        return f"{self.point.name} {self.hq}/{self.hkv}" + (f" {self.note}" if self.note else "")

    @property
    def heads(self) -> str:
        return f"{self.hq}/{self.hkv}"


def _latency(batch: int, q_len: int, keys: int, hq: int, hkv: int, **kw) -> LatencyCase:
    return LatencyCase(Point("latency", batch, q_len, keys, causal=True), hq, hkv, **kw)


# Issue 22's cases, with Gemma-4 31B's heads (32/4) or E2B's (8/1); MTP = 4 query tokens per
# sequence (the drafted ones) verified in one causal call.
LATENCY_CASES = (
    _latency(1, 1, 8192, 32, 4, variants=("fp8_mma", "mma16[bf16kv]", "triton[fp8kv]"), quick=True),
    _latency(1, 4, 28672, 8, 1, quick=True),
    _latency(8, 1, 8192, 8, 1),
    _latency(32, 4, 28672, 8, 1),
    _latency(1, 1, 64, 32, 4, note="floor"),  # seqused_k=64: one key block, the fixed cost alone
)


def latency_cases(quick: bool = False) -> list:
    """The latency cases; ``quick`` keeps decode B=1 8k and MTP B=1."""
    return [c for c in LATENCY_CASES if c.quick or not quick]


def latency_sets(working_bytes: int, l2_bytes: int = LATENCY_L2_BYTES) -> int:
    """Input sets a latency case rotates: the fewest whose working sets (the bytes each call
    moves, `work`) cover ``LATENCY_L2_FACTOR`` L2 caches, so no call finds its inputs in L2."""
    return max(1, -(-LATENCY_L2_FACTOR * l2_bytes // max(1, working_bytes)))


def variant_precision(label: str) -> str:
    """The ``precision`` a variant's calls pass ("auto" unless the label names a mode)."""
    return VARIANT_PRECISION.get(label, "auto")


def meta_plan(case: LatencyCase, variant: tuple, target: str = PLAN_TARGET):
    """The plan the dispatch makes for ``case`` on ``target``, from meta tensors (no memory, no
    GPU); raises `fa512.KernelUnavailableError` when the variant's kernel refuses."""
    import fa512

    _, kernel, kv = variant
    p, dev = case.point, "meta"
    pages = -(-p.seqlen_k // LATENCY_PAGE_SIZE)
    k = torch.empty(p.batch * pages, LATENCY_PAGE_SIZE, case.hkv, HEAD_DIM, dtype=KV_DTYPES[kv], device=dev)
    kw = dict(
        cu_seqlens_q=torch.empty(p.batch + 1, dtype=torch.int32, device=dev),
        seqused_k=torch.empty(p.batch, dtype=torch.int32, device=dev),
        page_table=torch.empty(p.batch, pages, dtype=torch.int32, device=dev),
        max_seqlen_q=p.q_len, max_seqlen_k=p.seqlen_k, causal=p.causal, window_left=p.window_left,
    )
    if kv == "fp8":
        kw["k_descale"] = torch.empty(p.batch, case.hkv, dtype=torch.float32, device=dev)
        kw["v_descale"] = torch.empty(p.batch, case.hkv, dtype=torch.float32, device=dev)
    q = torch.empty(p.batch * p.q_len, case.hq, HEAD_DIM, dtype=torch.bfloat16, device=dev)
    return fa512.plan(q, k, torch.empty_like(k), **kw, kernel=kernel, target=target)


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
    """How many input sets a grid point rotates: enough to cover ROTATE_FACTOR L2 caches, within memory."""
    n = max(1, min(MAX_SETS, -(-ROTATE_FACTOR * l2_bytes // max(1, set_bytes))))
    while n > 1 and n * set_bytes > MEMORY_FRACTION * free_bytes:
        n -= 1
    return n


# -- --list --------------------------------------------------------------------------------


def format_list(points: list, variants: list, cases: list, hq: int, hkv: int, heads: str) -> str:
    """The text of ``--list``: grid points x KV dtypes, then each latency case x variant with
    its bytes, rotation and the split count and CTAs the dispatch plans for an H200."""
    lines = [
        f"fa512 bench --list: {len(points)} points x {len(variants)} variants, heads {heads} (Hq={hq}, Hkv={hkv}); "
        f"{len(cases)} latency cases (heads per case)"
    ]
    if points:
        lines.append(f"{'point':30s} {'kv':5s} {'GFLOP':>10s} {'MB moved':>10s} {'FLOP/B':>8s} {'set GiB':>8s}")
    for p in points:
        for kv in sorted({v[2] for v in variants}):
            w = work(p, hq, hkv, KV_DTYPES[kv].itemsize)
            sb = input_set_bytes(p, hq, hkv, KV_DTYPES[kv].itemsize)
            lines.append(f"{p.name:30s} {kv:5s} {w['flops'] / 1e9:10.1f} {w['bytes'] / 1e6:10.1f} {w['intensity']:8.1f} {sb / 2**30:8.2f}")
    if not cases:
        return "\n".join(lines)
    lines.append(
        f"latency: CUDA-graph replay, L2 cold (input sets rotated until they cover {LATENCY_L2_FACTOR} x "
        f"{LATENCY_L2_BYTES / 2**20:.0f} MiB), next to the copy of the same bytes; splits and CTAs as planned for {PLAN_TARGET}"
    )
    lines.append(
        f"{'case':28s} {'variant':14s} {'kv':4s} {'bytes':>10s} {'MFLOP':>8s} {'sets':>5s} {'rotated MB':>10s} "
        f"{'set MiB':>8s} {'splits':>6s} {'CTAs':>5s}"
    )
    for c in cases:
        for v in (v for v in variants if v[0] in c.variants):
            kv_bytes = KV_DTYPES[v[2]].itemsize
            w = work(c.point, c.hq, c.hkv, kv_bytes)
            n = latency_sets(w["bytes"])
            sb = input_set_bytes(c.point, c.hq, c.hkv, kv_bytes, LATENCY_PAGE_SIZE)
            try:
                plan = meta_plan(c, v)
                splits, ctas = str(plan.num_splits), str(plan.ctas)
            except Exception as exc:  # noqa: BLE001 - a kernel not built here lists without its plan
                splits, ctas = "-", f"- ({type(exc).__name__})"
            lines.append(
                f"{c.name:28s} {v[0]:14s} {v[2]:4s} {w['bytes']:10d} {w['flops'] / 1e6:8.1f} {n:5d} "
                f"{n * w['bytes'] / 1e6:10.1f} {sb / 2**20:8.2f} {splits:>6s} {ctas:>5s}"
            )
    lines.append("CTAs: plan.ctas, the forward's grid (a split call's combine kernel is another launch)")
    return "\n".join(lines)


__all__ = [
    "CHUNKED", "DECODE_BATCHES", "DECODE_CONTEXTS", "HEAD_DIM", "KV_DTYPES", "LATENCY_CASES", "LATENCY_L2_BYTES",
    "LATENCY_L2_FACTOR", "LOCAL_WINDOW_LEFT", "LatencyCase", "MODES", "OPT_IN_VARIANTS", "Point", "PREFILL_LENGTHS",
    "VARIANT_PRECISION", "VARIANTS", "variant_precision",
    "bench_grid", "format_list", "input_set_bytes", "keys_read", "latency_cases", "latency_sets", "meta_plan",
    "rotation_sets", "visible_pairs", "work",
]
