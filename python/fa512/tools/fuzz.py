"""``python -m fa512 fuzz``: seeded random calls over the whole contract, each kernel against float64.

Case ``I`` of seed ``S`` is drawn from its own generator (``random.Random("fa512-fuzz:S:I")``
and a torch generator seeded from it), so it is the same on every machine, for every kernel
list, and ``--case I`` rebuilds it alone. Cases 0 .. len(`REGRESSIONS`) - 1 are fixed regression
cases (their values still come from the seed); the rest are random. The compile-time side of a
random case (dtypes, GQA ratio, page size, mask kind, descales present, split kind, query
shape: `Variant`) is one of ``--variants`` (default 32) drawn per seed, so that a GPU's first
run compiles tens of kernels, not one per case; everything else varies per case. Every case is
a legal call (README, "Semantics"): nothing the contract says must be rejected is generated.

What a case draws
-----------------
- batch 1..5, sequences with 0 keys and/or 0 queries among them; per sequence a query length
  (0, 1 decode, 2-8 MTP, 9-48 chunk, prefill q = k) and a key length (0, 1, a page or 64-key
  block boundary +-1, 2..400, 1000..3000); queries past the keys give rows that see nothing;
- heads Hkv 1 / 2 / 4 with Hq / Hkv = 1, 2, 4, 8, 16 (Hq <= 16); q bf16 / fp16; K/V e4m3 or q's
  dtype; logit std 0.5..6, q, k, v magnitudes and softmax_scale (None, 1.0, 2^-6..1) varied;
- paged K/V (page size 16, 32, 64, 128, and 48 / 96 / 256; random page order; spare pages no
  sequence references; page-table columns past a sequence's pages holding -1, num_pages,
  2^31 - 1 or another sequence's page; a page table whose rows are slices of wider rows) as
  the K and V halves of a vLLM (2, pages, page, Hkv, 512) cache, of FlashInfer's NHD
  (pages, 2, page, Hkv, 512) or HND (pages, 2, Hkv, page, 512) pages viewed as
  (pages, page, Hkv, 512), or with padded slots or heads; or packed K/V (contiguous, padded
  heads, or K and V interleaved per row), with slack rows between a sequence's seqused_k and
  the next cu_seqlens_k and rows past cu_seqlens_k[B];
- masks: causal (window_right -1 or 0, with or without window_left), full, local windows
  (left only, right only, both, zero-width);
- descales None / () / (1,) / (Hkv,) / (B, Hkv) per q, k, v, as views with offsets, stride 2,
  or transposed; num_splits 0 (planned) or 1..32; max_seqlen_q / _k exact, loose or defaulted;
- q as a contiguous tensor, a head slice, the q part of a fused qkv buffer, or (rarely) a view
  whose base is not 16-byte aligned (SM90 kernels refuse it: a documented TMA limit); rows past
  cu_seqlens_q[B]; ``out`` allocated by the call or given as a (possibly strided) view;
  metadata tensors as offset slices of larger buffers.

**Garbage.** Memory the call does not own is filled per case with NaN, +-Inf, +-the largest
finite value, a mix, large finite values, or zeros: slots past seqused_k in a last page, spare
pages, padded slots and heads, packed slack rows, q rows past cu_seqlens_q[B], descale buffer
elements next to the used ones, metadata buffer ends. For e4m3 the NaN bytes are 0x7f / 0xff
(e4m3fn has no Inf: "inf" writes +-448). A masked key must contribute exactly nothing whatever
its bytes; the float64 oracle gets the same values with all garbage zeroed, in plain layouts.

Checks per (case, kernel)
-------------------------
The call is ``fa512.attention(..., kernel=K)``; which kernel ran and its split count are read
from the op's launch record. Then, over the rows ``[0, cu_seqlens_q[B])``:
no NaN/Inf anywhere in out; rows with no visible key are out = 0 and lse = -inf, rows with one
are finite; rel L2 of out, the worst (row, head) rel L2 and the max lse error against the float64
reference within `TOLERANCES`; a given ``out``'s other rows and padding untouched; q, k, v and
the metadata unchanged. fp8_mma is compared (loosely) with the reference and, tightly
(`EMULATION_BAR`), with `fa512.emulation` of the variant and split count that ran.
``KernelUnavailableError`` and the documented TMA-alignment ValueError are refusals, counted per
kernel, not failures; the Triton interpreter skips bf16 cases (docs/toolchain.md: it computes
bf16 wrongly). Any other exception is a failure. A CUDA error ends the run (the context is gone).

Reading a failure
-----------------
Each failure prints one line: the command that reruns it alone, then ``#`` and the case (batch,
lengths, heads, dtypes, layout, mask, splits, descales, garbage) and what failed, e.g.::

    FAIL python -m fa512 fuzz --seed 0 --case 0 --kernel mma16  # [mma16-nan-rows-decode] B=3 ...
    ... garbage=nan: nonfinite out: 12288 values; ...

(H200, 2026-12-01: mma16 on 16-bit K/V reads the key tile past seqused_k, where NaN or Inf
times P = 0 is NaN; docs/tools.md gives the run.)

``--json PATH`` writes every case's parameters and per-kernel metrics. Exit status 1 on any
failure, 2 on bad arguments.

Speed
-----
Cases are small (a few thousand keys at most, work per case bounded by `WORK_BUDGET`).
On this project's 2-core CPU, ``fuzz --kernel reference --cases 50`` takes 4-20 s (the float64
oracle, the float32 reference kernel and the checks; the spread is other load on the machine);
under ``TRITON_INTERPRET=1`` the Triton interpreter takes 1-4 s per fp16 case. On the H200
(2026-12-01), once compiled: 500 cases of fp8_mma and mma16 in 31 s (the fp8_mma emulation
included), 150 of triton in 5 s, so 500 cases of all three in about a minute. The first run
compiles each new kernel variant (seconds each): ``--jobs`` (default one per core) first
compiles the planned CuTe DSL kernels in parallel into the FA512_CACHE_DIR disk cache (72-99
kernels for 150-500 cases in 16-32 s on 16 cores), and Triton compiles one specialisation per
case or so on first use (~1.5 s each: 236 s for 150 cases; its own cache keeps them).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

import torch

# Every fa512 import of this tool: the public API through ``fa512.``, then the internals it reads
# (a module that moves changes a line here only).
import fa512
from .. import compile_cache
from .. import op as _op
from ..backends import BACKENDS
from ..dispatch import target_of
from ..emulation import emulate_attention, fp8_mma_design
from .ab import json_safe

D = fa512.HEAD_DIM
KERNELS = ("auto", "fp8_mma", "mma16", "triton", "reference")
SM90_KERNELS = ("fp8_mma", "mma16")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn}
# Cap on sum over sequences of q_len * k_len * Hq (visible or not): keeps a case at ~0.1 s of
# float64 reference on 2 CPU cores.
WORK_BUDGET = 300_000
# Compile-time variants (`Variant`) the random cases of one seed draw from. Each is a kernel
# compile on a GPU's first run (seconds); drawn per case, 500 cases plan ~620 CuTe DSL kernels,
# with 32 variants ~100 (Triton still specialises on integer arguments: ~1 compile per case).
# 0: each case draws its own.
DEFAULT_VARIANTS = 32


@dataclass(frozen=True)
class Bars:
    rel_l2: float  # ||out - ref|| / ||ref|| over the (row, head) pairs that see a key
    row: float  # the worst such (row, head): ||out_r - ref_r|| / ||ref_r||
    lse: float  # max |lse - lse_ref| over them (natural log)


# One table, (kernel, kv dtype, q dtype) -> bars against the float64 reference fed the same
# K/V values. The output cast sets the floor: ~1.7e-3 rel L2 in bf16, ~2.2e-4 in fp16 (README,
# "Accuracy"; its H200 figures: triton 2.34e-3 worst with bf16 P.V, mma16 1.6-1.8e-3 bf16 and
# 2.2e-4 fp16, lse ~1e-5). Worst case seen by this fuzzer (H200, 2026-12-01, seeds 0-2, 1150
# cases; CPU seeds 0 and 7): triton and mma16 2.34e-3 / row 4.2e-3 with a bf16 out, 2.95e-4 /
# row 5.3e-4 with fp16; lse 1.4e-4; the float32 reference 2.1e-3 / 2.5e-3 (bf16), 2.4e-4 /
# 3.1e-4 (fp16), lse 6.1e-5. The bars sit 2.5-4x above those. A masked key that leaks is far
# above any of them: the garbage is NaN, Inf or the largest finite value.
_BF16_OUT = Bars(6e-3, 1.2e-2, 5e-4)
_FP16_OUT = Bars(1e-3, 2e-3, 5e-4)
_REF_BF16 = Bars(5e-3, 8e-3, 2e-4)  # float32 reference: the output cast and fp32 sums only
_REF_FP16 = Bars(7e-4, 1.2e-3, 2e-4)
# fp8_mma pays for e4m3 Q and P (README: 3.7e-2..5.5e-2 rel L2 on random inputs, lse up to ~1 at
# logit std 10; seen here: 0.115 / row 0.58 / lse 1.7), so it is held loosely against the
# reference (gross errors only) and tightly against its emulation (`EMULATION_BAR`).
_FP8_MMA = Bars(0.25, 1.5, 4.0)
TOLERANCES = {
    **{(k, kv, q): (_BF16_OUT if q == "bf16" else _FP16_OUT)
       for k in ("triton", "mma16") for kv, q in (("bf16", "bf16"), ("fp16", "fp16"), ("fp8", "bf16"), ("fp8", "fp16"))},
    ("reference", "bf16", "bf16"): _REF_BF16, ("reference", "fp8", "bf16"): _REF_BF16,
    ("reference", "fp16", "fp16"): _REF_FP16, ("reference", "fp8", "fp16"): _REF_FP16,
    ("fp8_mma", "fp8", "bf16"): _FP8_MMA, ("fp8_mma", "fp8", "fp16"): _FP8_MMA,
}
# fp8_mma against `fa512.emulation` of the variant that ran (FP8 wgmma accumulation modelled bit
# for bit): 0..2.2e-4 rel L2 on the H200 (README; this fuzzer: at most 1.3e-4 over 456 cases), so
# a kernel above 5e-4 does not compute what its design says.
EMULATION_BAR = 5e-4
# ValueErrors that document a kernel's limit rather than bad input (fa512.cute_backend: TMA).
DOCUMENTED_LIMITS = ("16-byte aligned base address", "strides that are multiples of 16 bytes")
CUDA_FATAL = ("CUDA error", "illegal memory access", "unspecified launch failure", "CUBLAS_STATUS")

# Raw bits of the values garbage is made of, per storage dtype.
_PATTERNS = {
    "fp8": {"nan": (0x7F, 0xFF), "inf": (0x7E, 0xFE), "huge": (0x7E, 0xFE)},  # e4m3fn: no Inf; 0x7e = 448
    "fp16": {"nan": (0x7E00, 0xFE00, 0x7C01), "inf": (0x7C00, 0xFC00), "huge": (0x7BFF, 0xFBFF)},
    "bf16": {"nan": (0x7FC0, 0xFFC0, 0x7F81), "inf": (0x7F80, 0xFF80), "huge": (0x7F7F, 0xFF7F)},
}
GARBAGE = ("zero", "nan", "inf", "huge", "mixed", "finite")
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
_GARBAGE_BLOCK = 4099  # elements of one random garbage block (prime: no alignment with rows)


@dataclass
class Spec:
    """One fuzz case: every parameter of the call, as plain values (JSON-able)."""

    index: int
    seed: int  # torch generator seed for the values
    q_dtype: str
    kv_dtype: str
    hq: int
    hkv: int
    q_lens: list
    k_lens: list
    paged: bool
    page_size: int = 0
    kv_view: str = "vllm"  # paged: vllm | nhd | hnd | padded | headpad; packed: contig | headpad | fused
    spare_pages: int = 0
    table_extra: int = 0  # page-table columns past the longest sequence's pages
    table_pad: int = 0  # extra columns of the table's row stride (a slice of wider rows)
    slack: list = field(default_factory=list)  # packed: unused rows after each sequence's keys
    kv_pad_rows: int = 0  # packed: rows past cu_seqlens_k[B]
    pass_seqused: bool = True  # packed only: False lets seqused_k default from cu_seqlens_k
    q_view: str = "contig"  # contig | headpad | qkv | misaligned
    q_pad_rows: int = 0
    out_view: str = "none"  # none | contig | headpad
    causal: bool = False
    window_left: int = -1
    window_right: int = -1
    softmax_scale: Optional[float] = None
    descale: dict = field(default_factory=lambda: {"q": "none", "k": "none", "v": "none"})
    num_splits: int = 0
    max_seqlen_q: Optional[int] = None  # None: the API's default
    max_seqlen_k: Optional[int] = None
    meta_offset: bool = False
    garbage: str = "zero"
    logit_std: float = 2.0
    q_std: float = 1.0
    v_std: float = 1.0
    name: str = ""  # regression cases

    def describe(self) -> str:
        """One line: the call's shape, layout, mask, splits, descales and garbage."""
        if self.paged:
            kv = f"paged{self.page_size}/{self.kv_view}+{self.spare_pages}sp"
        else:
            kv = f"packed/{self.kv_view}" + (f"+slack{sum(self.slack)}" if any(self.slack) else "")
        if self.causal:
            mask = "causal" + (f"[{self.window_left},{self.window_right}]" if self.window_left >= 0 else "")
        elif self.window_left >= 0 or self.window_right >= 0:
            mask = f"local[{self.window_left},{self.window_right}]"
        else:
            mask = "full"
        desc = "/".join(self.descale[n] for n in "qkv")
        text = (f"B={len(self.q_lens)} q={self.q_lens} k={self.k_lens} H={self.hq}/{self.hkv} "
                f"q={self.q_dtype} kv={self.kv_dtype} {kv} {mask} splits={self.num_splits} "
                f"descale={desc} q:{self.q_view}+{self.q_pad_rows} out:{self.out_view} garbage={self.garbage}")
        return f"[{self.name}] {text}" if self.name else text


# -- case generation ---------------------------------------------------------------------------


def _regression_mma16_nan_rows(q_lens) -> dict:
    # H200: mma16 returned NaN rows on this paged bf16 cache with NaN in the unused slots.
    return dict(q_dtype="bf16", kv_dtype="bf16", hq=8, hkv=1, q_lens=q_lens, k_lens=[70, 130, 1], paged=True,
                page_size=64, spare_pages=2, causal=True, garbage="nan", max_seqlen_q=max(q_lens), max_seqlen_k=130)


# (name, fields); the values (and the garbage) still come from the run's seed. The H200 report
# gave no query lengths: decode, and a chunk whose last sequence has more queries than keys.
REGRESSIONS = (
    ("mma16-nan-rows-decode", _regression_mma16_nan_rows([1, 1, 1])),
    ("mma16-nan-rows-chunk", _regression_mma16_nan_rows([4, 3, 2])),
)


def _k_len(rng: random.Random, page: int) -> int:
    kind = rng.choices(("zero", "one", "boundary", "small", "medium", "long"), (5, 5, 25, 30, 25, 10))[0]
    if kind == "zero":
        return 0
    if kind == "one":
        return 1
    if kind == "boundary":  # a page (or 64-key block / 32-key tile) edge +-1
        unit = page if page and rng.random() < 0.7 else rng.choice((32, 64, 128))
        return max(1, unit * rng.randint(1, 3) + rng.choice((-1, 0, 1)))
    if kind == "small":
        return rng.randint(2, 64)
    if kind == "medium":
        return rng.randint(65, 400)
    return rng.randint(1000, 3000)


def _q_len(rng: random.Random, kind: str, k_len: int) -> int:
    if kind == "empty":
        return 0
    if kind == "decode":
        return 1
    if kind == "mtp":
        return rng.randint(2, 8)
    if kind == "chunk":  # the chunk's tokens are usually among the keys; sometimes more queries than keys
        n = rng.randint(9, 48)
        return n if rng.random() < 0.2 else max(1, min(n, k_len))
    return max(1, min(k_len, 96))  # prefill: the whole (short) sequence


@dataclass(frozen=True)
class Variant:
    """The compile-time side of a case: what picks a kernel variant (dtypes, GQA ratio, paging,
    mask kind, descales present, split kind, query shape). Runtime values vary within it."""

    kv_dtype: str
    q_dtype: str
    hkv: int
    group: int
    page_size: int  # 0: packed K/V
    mode: str  # decode | mtp | chunk | prefill | mixed
    mask: str  # causal | causal_left | full | left | right | both | zero
    descales: str  # which of "qkv" are given
    splits: str  # auto | one | many


def _variant(rng: random.Random) -> Variant:
    kv_dtype = rng.choices(("fp8", "bf16", "fp16"), (50, 25, 25))[0]
    hkv = rng.choices((1, 2, 4), (50, 35, 15))[0]
    presence = rng.choices(("", "kv", "qkv", "any"), (25, 35, 25, 15) if kv_dtype == "fp8" else (50, 15, 20, 15))[0]
    return Variant(
        kv_dtype=kv_dtype,
        q_dtype=rng.choice(("bf16", "fp16")) if kv_dtype == "fp8" else kv_dtype,
        hkv=hkv,
        group=rng.choice([g for g in (1, 2, 4, 8, 16) if hkv * g <= 16]),
        page_size=rng.choices((0, 16, 32, 64, 128, 48, 96, 256), (30, 7, 14, 21, 14, 3, 6, 5))[0],
        mode=rng.choices(("decode", "mtp", "chunk", "prefill", "mixed"), (30, 20, 20, 10, 20))[0],
        mask=rng.choices(("causal", "causal_left", "full", "left", "right", "both", "zero"), (32, 13, 25, 10, 7, 10, 3))[0],
        descales="".join(n for n in "qkv" if rng.random() < 0.5) if presence == "any" else presence,
        splits=rng.choices(("auto", "one", "many"), (55, 15, 30))[0],
    )


@functools.lru_cache(maxsize=64)
def palette(seed: int, size: int) -> tuple:
    """The ``size`` variants the random cases of ``seed`` draw from."""
    rng = random.Random(f"fa512-fuzz:{seed}:palette")
    return tuple(_variant(rng) for _ in range(size))


def _window(rng: random.Random, mask: str) -> tuple:
    """(causal, window_left, window_right) of a mask kind."""
    left = rng.choice((0, 1, rng.randint(2, 128), rng.randint(129, 1500)))
    right = rng.choice((0, 1, rng.randint(2, 64)))
    return {
        "causal": (True, -1, rng.choice((-1, 0))), "causal_left": (True, left, rng.choice((-1, 0))),
        "full": (False, -1, -1), "left": (False, left, -1), "right": (False, -1, right),
        "both": (False, left, right), "zero": (False, 0, 0),
    }[mask]


def random_spec(seed: int, index: int, variants: int = DEFAULT_VARIANTS) -> Spec:
    """The random case ``index`` of ``seed`` (see the module docstring for the space); with
    ``variants`` > 0 its compile-time side is one of `palette` (seed, variants)."""
    rng = random.Random(f"fa512-fuzz:{seed}:{index}")
    var = palette(seed, variants)[rng.randrange(variants)] if variants > 0 else _variant(rng)
    hq, page, paged = var.hkv * var.group, var.page_size, var.page_size > 0
    batch = rng.choices((1, 2, 3, 4, 5), (25, 25, 20, 15, 15))[0]
    for _ in range(20):  # redraw lengths until the case fits the work budget
        k_lens = [_k_len(rng, page) for _ in range(batch)]
        kinds = [rng.choices(("empty", "decode", "mtp", "chunk", "prefill"), (10, 35, 20, 20, 15))[0]
                 if var.mode == "mixed" else var.mode for _ in range(batch)]
        q_lens = [_q_len(rng, kind, k) for kind, k in zip(kinds, k_lens)]
        if sum(q * max(k, 1) for q, k in zip(q_lens, k_lens)) * hq <= WORK_BUDGET and sum(k_lens) <= 6000:
            break
    else:
        k_lens = [min(k, 300) for k in k_lens]
        q_lens = [min(q, 8) for q in q_lens]

    spec = Spec(index=index, seed=rng.getrandbits(62), q_dtype=var.q_dtype, kv_dtype=var.kv_dtype, hq=hq,
                hkv=var.hkv, q_lens=q_lens, k_lens=k_lens, paged=paged, page_size=page)
    if paged:
        spec.kv_view = rng.choices(("vllm", "nhd", "hnd", "padded", "headpad"), (35, 20, 20, 10, 15))[0]
        spec.spare_pages = rng.choice((0, 0, 1, 2, 3))
        spec.table_extra = rng.choice((0, 0, 1, 2, 5))
        spec.table_pad = rng.choice((0, 0, 0, 1, 3))
    else:
        spec.kv_view = rng.choices(("contig", "headpad", "fused"), (50, 20, 30))[0]
        spec.slack = [rng.choice((0, 0, 0, 1, 3, 17)) for _ in range(batch)]
        spec.kv_pad_rows = rng.choice((0, 0, 1, 5))
        spec.pass_seqused = any(spec.slack) or rng.random() < 0.6
    spec.q_view = rng.choices(("contig", "headpad", "qkv", "misaligned"), (55, 15, 25, 5))[0]
    spec.q_pad_rows = rng.choice((0, 0, 0, 1, 3))
    spec.out_view = rng.choices(("none", "contig", "headpad"), (50, 25, 25))[0]
    spec.causal, spec.window_left, spec.window_right = _window(rng, var.mask)
    spec.softmax_scale = rng.choices((None, 1.0, 2.0 ** rng.uniform(-6, 0)), (45, 30, 25))[0]
    modes = ("scalar0d", "scalar1", "per_head", "per_head_strided", "per_bh", "per_bh_t", "per_bh_strided")
    spec.descale = {n: (rng.choice(modes) if n in var.descales else "none") for n in "qkv"}
    spec.num_splits = {"auto": 0, "one": 1, "many": rng.choice((rng.randint(2, 8), rng.randint(9, fa512.MAX_SPLITS)))}[var.splits]
    true_q, true_k = max(q_lens), max(k_lens)
    bound = rng.choices(("exact", "loose", "default"), (60, 25, 15))[0]
    if bound == "exact":
        spec.max_seqlen_q, spec.max_seqlen_k = true_q, true_k
    elif bound == "loose":
        spec.max_seqlen_q = true_q + rng.choice((0, 1, 7, 40))
        spec.max_seqlen_k = true_k + rng.choice((0, 1, 63, 500))
    spec.meta_offset = rng.random() < 0.3
    spec.garbage = rng.choices(GARBAGE, (15, 25, 15, 10, 25, 10))[0]
    spec.logit_std = rng.choice((0.5, 1.0, 2.0, 4.0, 6.0))
    spec.q_std = 2.0 ** rng.uniform(-2, 2)
    spec.v_std = 2.0 ** rng.uniform(-2, 3)
    return spec


def make_spec(seed: int, index: int, variants: int = DEFAULT_VARIANTS) -> Spec:
    """Case ``index`` of ``seed``: the fixed regression cases first, then random ones (`random_spec`)."""
    if index < len(REGRESSIONS):
        name, fields = REGRESSIONS[index]
        rng = random.Random(f"fa512-fuzz:{seed}:{index}")
        return Spec(index=index, seed=rng.getrandbits(62), name=name, **fields)
    return random_spec(seed, index, variants)


# -- building the tensors ----------------------------------------------------------------------


class _Held:
    """A base buffer and the view of it the call takes: moved to a device by moving the base
    (``tensor.to`` of a view would make it contiguous)."""

    def __init__(self, base: torch.Tensor, view: Callable = lambda b: b):
        self.base, self.view = base, view

    def on(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        """(the view, its base) on ``device``, always a fresh copy: a call may write into it."""
        base = self.base.to(device, copy=True)
        return self.view(base), base


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_BITS[t.element_size()])


def _garbage_bits(mode: str, name: str, shape, g: torch.Generator) -> torch.Tensor:
    """Raw bits of garbage of ``mode`` for the storage dtype ``name`` ("fp8", "fp16", "bf16").

    A random block of `_GARBAGE_BLOCK` elements tiled over the buffer: per-element draws over
    megabytes of cache cost more than the rest of a case on 2 CPU cores."""
    dtype = DTYPES[name]
    n = math.prod(shape)
    if mode == "zero" or n == 0:
        return _bits(torch.zeros(shape, dtype=dtype))
    block = min(n, _GARBAGE_BLOCK)
    if mode == "finite":
        values = _bits(_store(torch.randn(block, generator=g) * (64.0 if name == "fp8" else 1e3), name))
    else:
        table = _PATTERNS[name]
        pats = table["nan"] + table["inf"] + table["huge"] if mode == "mixed" else table[mode]
        width = 8 * dtype.itemsize  # two's complement of the patterns above the signed range
        signed = [p - (1 << width) if width > 8 and p >= 1 << (width - 1) else p for p in pats]
        values = torch.tensor(signed, dtype=_BITS[dtype.itemsize])[torch.randint(len(pats), (block,), generator=g)]
    return values.repeat(-(-n // block))[:n].view(shape)


def _store(x: torch.Tensor, name: str) -> torch.Tensor:
    """float32 values in the storage dtype (e4m3 saturating at +-448)."""
    return x.clamp(-448, 448).to(torch.float8_e4m3fn) if name == "fp8" else x.to(DTYPES[name])


def _fill(shape, views: Callable, parts: tuple, owned: tuple, name: str, garbage: str, g) -> torch.Tensor:
    """Bits of a base buffer of ``shape`` (storage dtype ``name``) holding ``parts[i]`` in the
    view ``views(base)[i]`` where ``owned[i]`` (a bool broadcast to the part) is set, and garbage
    everywhere else."""
    clean = torch.zeros(shape, dtype=_BITS[DTYPES[name].itemsize])
    mask = torch.zeros(shape, dtype=torch.bool)
    for view, view_mask, part, own in zip(views(clean), views(mask), parts, owned):
        view.copy_(part)
        view_mask.copy_(own.expand(view_mask.shape))
    return torch.where(mask, clean, _garbage_bits(garbage, name, shape, g))


@dataclass
class Built:
    """One case's tensors: the kernel's call (garbage around) and the oracle's (clean, plain)."""

    call: dict  # keyword arguments of fa512.attention (on CPU bases; `call_on` moves them)
    held: dict  # name -> _Held, the tensors of ``call``
    oracle: dict  # keyword arguments of attention_ref: contiguous, garbage zeroed
    valid_rows: int
    out_owned: Optional[torch.Tensor]  # bool over out's base: the rows the call writes


def _kv_layout(spec: Spec, rows: int) -> tuple[tuple, Callable]:
    """(shape of the K/V base, fn(base) -> (k view, v view)) for ``rows`` pages (paged) or
    tokens (packed). One base holds both K and V, as the frameworks' caches do."""
    h, s, view = spec.hkv, spec.page_size, spec.kv_view
    if spec.paged:
        if view == "vllm":  # vLLM's kv_cache[layer]: (2, num_blocks, block_size, Hkv, D)
            return (2, rows, s, h, D), lambda b: (b[0], b[1])
        if view == "nhd":  # FlashInfer's NHD pages: (num_pages, 2, page_size, Hkv, D)
            return (rows, 2, s, h, D), lambda b: (b[:, 0], b[:, 1])
        if view == "hnd":  # FlashInfer's HND pages, viewed as (pages, page, Hkv, D)
            return (rows, 2, h, s, D), lambda b: (b[:, 0].transpose(1, 2), b[:, 1].transpose(1, 2))
        if view == "padded":  # slots past the page size in every page
            return (2, rows, s + 3, h, D), lambda b: (b[0, :, :s], b[1, :, :s])
        return (2, rows, s, h + 1, D), lambda b: (b[0, :, :, 1:], b[1, :, :, :h])  # headpad
    if view == "fused":  # K and V interleaved per token
        return (rows, 2, h, D), lambda b: (b[:, 0], b[:, 1])
    if view == "headpad":
        return (2, rows, h + 2, D), lambda b: (b[0, :, 2:], b[1, :, 1 : h + 1])
    return (2, rows, h, D), lambda b: (b[0], b[1])


def _q_layout(view: str, rows: int, hq: int, hkv: int) -> tuple[tuple, Callable]:
    """(shape of q's (or out's) base, fn(base) -> the (rows, Hq, D) view)."""
    if view == "headpad":
        return (rows, hq + 2, D), lambda b: b[:, 1 : hq + 1]
    if view == "qkv":  # the q part of a fused (tokens, Hq + 2 Hkv, D) projection
        return (rows, hq + 2 * hkv, D), lambda b: b[:, :hq]
    if view == "misaligned":  # base address 2 bytes past a 16-byte boundary
        return (rows * hq * D + 8,), lambda b: b[1 : 1 + rows * hq * D].view(rows, hq, D)
    return (rows, hq, D), lambda b: b


def _descale(mode: str, vals: torch.Tensor) -> _Held:
    """``vals`` (B, Hkv) as the descale tensor of ``mode``, NaN in the base's unused elements."""
    b, h = vals.shape
    if mode == "per_head":
        return _Held(vals[0].clone())
    if mode == "per_bh":
        return _Held(vals.clone())
    if mode == "per_bh_t":
        return _Held(vals.t().contiguous(), lambda x: x.t())
    base = torch.full({"per_head_strided": (2 * h,), "per_bh_strided": (b, h + 2)}.get(mode, (3,)), float("nan"))
    if mode == "per_head_strided":
        base[::2] = vals[0]
        return _Held(base, lambda x: x[::2])
    if mode == "per_bh_strided":
        base[:, 1 : h + 1] = vals
        return _Held(base, lambda x: x[:, 1 : h + 1])
    base[1] = vals[0, 0]  # scalar0d: a 0-d view; scalar1: a (1,) view
    return _Held(base, (lambda x: x[1]) if mode == "scalar0d" else (lambda x: x[1:2]))


def _descale_values(mode: str, b: int, h: int, g) -> torch.Tensor:
    """(B, Hkv) values 2^U(-2, 2), as the mode broadcasts them (one, per head, per (b, h))."""
    vals = torch.exp2(torch.rand(b, h, generator=g) * 4 - 2)
    if mode.startswith("scalar"):
        return vals[:1, :1].expand(b, h).clone()
    if mode.startswith("per_head"):
        return vals[:1].expand(b, h).clone()
    return vals


def _metadata(values: list, offset: bool) -> _Held:
    """An int32 tensor of ``values``, or a slice of a larger buffer with junk around it."""
    t = torch.tensor(values, dtype=torch.int32)
    if not offset:
        return _Held(t)
    n = len(values)
    base = torch.full((n + 5,), -7, dtype=torch.int32)
    base[-1] = 2**31 - 1
    base[2 : 2 + n] = t
    return _Held(base, lambda x: x[2 : 2 + n])


def build(spec: Spec) -> Built:
    """The case's tensors on the CPU (values from ``spec.seed``)."""
    g = torch.Generator().manual_seed(spec.seed)
    batch, hq, hkv = len(spec.q_lens), spec.hq, spec.hkv
    scale = fa512.DEFAULT_SOFTMAX_SCALE if spec.softmax_scale is None else spec.softmax_scale
    descale_vals = {n: _descale_values(spec.descale[n], batch, hkv, g) if spec.descale[n] != "none" else None
                    for n in "qkv"}
    # K's magnitude gives the logits their std: scale * |q| * |k| * sqrt(D) * q_descale * k_descale
    # = logit_std for every (sequence, kv head), so descales over 2^-2..2^2 vary the stored
    # values, not the logits (fp8_mma's error grows with the logit scale).
    k_std = torch.full((batch, hkv), spec.logit_std / (scale * spec.q_std * math.sqrt(D)))
    for n in "qk":
        if descale_vals[n] is not None:
            k_std /= descale_vals[n]
    if spec.kv_dtype == "fp8":
        k_std = k_std.clamp(2.0 ** -5, 64.0)
    k_bits = [_bits(_store(torch.randn(n, hkv, D, generator=g) * k_std[b].view(1, hkv, 1), spec.kv_dtype))
              for b, n in enumerate(spec.k_lens)]
    v_bits = [_bits(_store(torch.randn(n, hkv, D, generator=g) * spec.v_std, spec.kv_dtype)) for n in spec.k_lens]
    held, oracle, call = {}, {}, {}

    # -- K/V: canonical (pages, page, Hkv, D) or (tokens, Hkv, D) arrays, then the call's layout --
    kv_bits = _BITS[DTYPES[spec.kv_dtype].itemsize]
    if spec.paged:
        s = spec.page_size
        n_pages = [-(-n // s) for n in spec.k_lens]
        rows = max(1, sum(n_pages) + spec.spare_pages)
        order = torch.randperm(rows, generator=g).tolist()
        pages, used = [], 0
        for n in n_pages:
            pages.append(order[used : used + n])
            used += n
        canon = [torch.zeros(rows, s, hkv, D, dtype=kv_bits) for _ in range(2)]
        slots = torch.zeros(rows, s, dtype=torch.bool)
        for b, plist in enumerate(pages):
            n = spec.k_lens[b]
            if n:
                idx = torch.tensor(plist)
                for part, seqs in zip(canon, (k_bits, v_bits)):
                    padded = seqs[b].new_zeros(len(plist) * s, hkv, D)
                    padded[:n] = seqs[b]
                    part.index_copy_(0, idx, padded.view(len(plist), s, hkv, D))
                slots.index_copy_(0, idx, (torch.arange(len(plist) * s) < n).view(len(plist), s))
        owned = slots.view(rows, s, 1, 1)
        width = max(1, max(n_pages)) + spec.table_extra
        # unread entries: out of range, or pages of this or another sequence
        junk = torch.tensor((-1, rows, 2**31 - 1, *order[:3]), dtype=torch.int32)
        table = junk[torch.randint(len(junk), (batch, width + spec.table_pad), generator=g)]
        clean_table = torch.zeros(batch, width, dtype=torch.int32)
        for b, plist in enumerate(pages):
            table[b, : len(plist)] = clean_table[b, : len(plist)] = torch.tensor(plist, dtype=torch.int32)
        held["page_table"] = _Held(table, lambda x: x[:, :width])
        oracle["page_table"] = clean_table
    else:
        starts, pos = [], 0
        for n, slack in zip(spec.k_lens, spec.slack):
            starts.append(pos)
            pos += n + slack
        rows = pos + spec.kv_pad_rows
        canon = [torch.zeros(rows, hkv, D, dtype=kv_bits) for _ in range(2)]
        owned = torch.zeros(rows, 1, 1, dtype=torch.bool)
        for b, start in enumerate(starts):
            n = spec.k_lens[b]
            canon[0][start : start + n], canon[1][start : start + n] = k_bits[b], v_bits[b]
            owned[start : start + n] = True
        held["cu_seqlens_k"] = _metadata(starts + [pos], spec.meta_offset)
        oracle["cu_seqlens_k"] = torch.tensor(starts + [pos], dtype=torch.int32)
    shape, views = _kv_layout(spec, rows)
    kv_dtype = DTYPES[spec.kv_dtype]
    held["kv"] = _Held(_fill(shape, views, canon, (owned, owned), spec.kv_dtype, spec.garbage, g),
                       lambda b: views(b.view(kv_dtype)))
    oracle["k"], oracle["v"] = (x.view(kv_dtype) for x in canon)

    # -- q, out, metadata, descales ---------------------------------------------------------
    valid = sum(spec.q_lens)
    total_q = valid + spec.q_pad_rows
    q_dtype = DTYPES[spec.q_dtype]
    q_canon = torch.zeros(total_q, hq, D, dtype=q_dtype)
    q_canon[:valid] = torch.randn(valid, hq, D, generator=g) * spec.q_std
    q_shape, q_view = _q_layout(spec.q_view, total_q, hq, hkv)
    q_owned = (torch.arange(total_q) < valid).view(total_q, 1, 1)
    q_fill = _fill(q_shape, lambda b: (q_view(b),), (_bits(q_canon),), (q_owned,), spec.q_dtype, spec.garbage, g)
    held["q"] = _Held(q_fill, lambda b: q_view(b.view(q_dtype)))
    oracle["q"] = q_canon
    out_owned = None
    if spec.out_view != "none":
        o_shape, o_view = _q_layout(spec.out_view, total_q, hq, hkv)
        out_bits = _garbage_bits("nan" if spec.garbage == "zero" else spec.garbage, spec.q_dtype, o_shape, g)
        held["out"] = _Held(out_bits, lambda b: o_view(b.view(q_dtype)))
        out_owned = torch.zeros(o_shape, dtype=torch.bool)
        o_view(out_owned)[:valid] = True

    cu_q = [0]
    for n in spec.q_lens:
        cu_q.append(cu_q[-1] + n)
    held["cu_seqlens_q"] = _metadata(cu_q, spec.meta_offset)
    if spec.paged or spec.pass_seqused:
        held["seqused_k"] = _metadata(spec.k_lens, spec.meta_offset)
    oracle["cu_seqlens_q"] = torch.tensor(cu_q, dtype=torch.int32)
    oracle["seqused_k"] = torch.tensor(spec.k_lens, dtype=torch.int32)
    for n in "qkv":
        if descale_vals[n] is not None:
            held[f"{n}_descale"] = _descale(spec.descale[n], descale_vals[n])
            oracle[f"{n}_descale"] = descale_vals[n]

    mask = dict(causal=spec.causal, window_left=spec.window_left, window_right=spec.window_right)
    call.update(mask, num_splits=spec.num_splits)
    for name in ("max_seqlen_q", "max_seqlen_k", "softmax_scale"):
        if getattr(spec, name) is not None:
            call[name] = getattr(spec, name)
    oracle.update(mask, softmax_scale=scale, max_seqlen_q=max(spec.q_lens), max_seqlen_k=max(spec.k_lens))
    return Built(call, held, oracle, valid, out_owned)


def call_on(built: Built, device) -> tuple[dict, dict, Optional[torch.Tensor]]:
    """(kernel call kwargs, oracle kwargs, the base of the given out or None) on ``device``:
    fresh copies of every base, the call's views rebuilt on them."""
    call, out_base = dict(built.call), None
    for name, h in built.held.items():
        view, base = h.on(device)
        if name == "kv":
            call["k"], call["v"] = view
        else:
            call[name] = view
        if name == "out":
            out_base = base
    return call, oracle_on(built, device), out_base


def oracle_on(built: Built, device) -> dict:
    """The oracle's keyword arguments (plain layouts, garbage zeroed) on ``device``."""
    return {n: t.to(device) if isinstance(t, torch.Tensor) else t for n, t in built.oracle.items()}


# -- running one kernel on one case --------------------------------------------------------------


def _traced(fn: Callable):
    """Run ``fn()`` and return (its result, the launch record: kernel, num_splits, config).

    The one place this module reads the op's record of the last eager call (`fa512.op`)."""
    _op.last_launch.clear()
    result = fn()
    return result, dict(_op.last_launch)


def _snapshot(call: dict) -> dict:
    """Copies of the tensors a call must not modify (everything but out)."""
    return {n: t.clone() for n, t in call.items() if isinstance(t, torch.Tensor) and n != "out"}


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def compare(out, lse, ref_out, ref_lse, rows: int) -> dict:
    """Errors of (out, lse) against the float64 reference over the first ``rows`` rows."""
    o, r = out[:rows].double(), ref_out[:rows].double()
    l, rl = lse[:, :rows].double().t(), ref_lse[:, :rows].double().t()  # (rows, Hq)
    vis = torch.isfinite(rl)
    m = {"nonfinite_out": int((~torch.isfinite(o)).sum()), "visible_rows": int(vis.sum()),
         "empty_rows": int((~vis).sum())}
    m["empty_out_nonzero"] = int((o[~vis] != 0).any(dim=-1).sum())
    m["empty_lse_not_neg_inf"] = int((l[~vis] != -math.inf).sum())
    m["visible_lse_nonfinite"] = int((~torch.isfinite(l[vis])).sum())
    diff, ref = (o - r)[vis], r[vis]
    norm = float(ref.norm())
    m["rel_l2"] = float(diff.norm()) / norm if norm > 0 else float(diff.norm())
    if ref.shape[0]:
        row_norm = ref.norm(dim=-1)
        # rows whose output nearly cancels are measured against 1% of the typical row norm
        floor = 1e-2 * float(row_norm.pow(2).mean().sqrt())
        m["row_rel"] = float((diff.norm(dim=-1) / row_norm.clamp_min(max(floor, 1e-30))).max())
        both = torch.isfinite(l[vis])
        m["lse_err"] = float((l[vis][both] - rl[vis][both]).abs().max()) if bool(both.any()) else 0.0
    else:
        m["row_rel"] = m["lse_err"] = 0.0
    return m


def _problems(m: dict, bars: Bars) -> list:
    found = []
    if m["nonfinite_out"]:
        found.append(f"nonfinite out: {m['nonfinite_out']} values")
    if m["empty_out_nonzero"] or m["empty_lse_not_neg_inf"]:
        found.append(f"rows without a visible key: {m['empty_out_nonzero']} with out != 0, "
                     f"{m['empty_lse_not_neg_inf']} with lse != -inf")
    if m["visible_lse_nonfinite"]:
        found.append(f"{m['visible_lse_nonfinite']} rows with visible keys have a non-finite lse")
    for key, bar in (("rel_l2", bars.rel_l2), ("row_rel", bars.row), ("lse_err", bars.lse)):
        if not m[key] <= bar:  # NaN fails too
            found.append(f"{key} {m[key]:.3g} > {bar:g}")
    return found


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equal (NaN garbage compares equal to itself)."""
    return torch.equal(_bits(a), _bits(b)) if a.is_floating_point() else torch.equal(a, b)


def _emulation_metrics(out, lse, oracle: dict, record: dict, rows: int) -> dict:
    """fp8_mma against `fa512.emulation` of the variant and split count that ran."""
    splits = max(1, int(record.get("num_splits") or 1))
    design = fp8_mma_design(record["config"].with_split(splits > 1))
    emu_out, emu_lse = emulate_attention(**oracle, num_splits=splits, design=design)
    ref = emu_out[:rows].double()
    m = {"vs_emu": float((out[:rows].double() - ref).norm()) / max(float(ref.norm()), 1e-30)}
    finite = torch.isfinite(emu_lse[:, :rows])
    m["lse_vs_emu"] = float((lse[:, :rows][finite] - emu_lse[:, :rows][finite]).abs().max()) if bool(finite.any()) else 0.0
    return m


def run_kernel(spec: Spec, built: Built, kernel: str, device, oracle_out) -> dict:
    """One (case, kernel): status pass / fail / refused / skipped, the kernel that ran, metrics."""
    res = {"kernel": kernel, "status": "pass", "problems": []}
    if kernel == "triton" and spec.q_dtype == "bf16" and device.type == "cpu" and target_of(device).triton_interpreter:
        return {**res, "status": "skipped", "reason": "the Triton interpreter computes bf16 wrongly"}
    call, oracle, out_base = call_on(built, device)
    before = _snapshot(call)
    out_before = out_base.clone() if out_base is not None else None
    expect = kernel
    t0 = time.perf_counter()
    try:
        if kernel == "auto":
            expect = fa512.plan(**call, kernel="auto").kernel
        (out, lse), record = _traced(lambda: fa512.attention(**call, kernel=kernel))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except (fa512.KernelUnavailableError, ValueError) as exc:
        if isinstance(exc, fa512.KernelUnavailableError) or any(p in str(exc) for p in DOCUMENTED_LIMITS):
            return {**res, "status": "refused", "reason": str(exc).split(": ", 1)[-1][:200]}
        return {**res, "status": "fail", "problems": [f"raised {_error_line(exc)}"]}
    except Exception as exc:  # a crash is a finding; the fuzz goes on (CUDA errors end it, see main)
        return {**res, "status": "fail", "problems": [f"raised {_error_line(exc)}"], "fatal": _is_fatal(exc)}
    res["seconds"] = time.perf_counter() - t0
    res["ran"], res["num_splits"] = record.get("kernel"), record.get("num_splits")
    problems = res["problems"]
    if res["ran"] != expect:
        problems.append(f"ran {res['ran']!r}, expected {expect!r}")
    if tuple(out.shape) != tuple(call["q"].shape) or tuple(lse.shape) != (spec.hq, call["q"].shape[0]) \
            or lse.dtype != torch.float32:
        problems.append(f"shapes: out {tuple(out.shape)}, lse {tuple(lse.shape)} {lse.dtype}")
        return {**res, "status": "fail"}
    m = res["metrics"] = compare(out, lse, *oracle_out, built.valid_rows)
    bars = TOLERANCES.get((res["ran"], spec.kv_dtype, spec.q_dtype))
    problems += _problems(m, bars) if bars else [f"no tolerance for {res['ran']!r} on {spec.kv_dtype} K/V"]
    if out_base is not None:
        if out.data_ptr() != call["out"].data_ptr():
            problems.append("returned a new out instead of the given one")
        if bool(((_bits(out_base) != _bits(out_before)) & ~built.out_owned.to(device)).any()):
            problems.append("wrote outside the given out's valid rows")
    changed = [n for n, t in before.items() if not _same(t, call[n])]
    if changed:
        problems.append(f"modified its inputs: {', '.join(changed)}")
    if res["ran"] == "fp8_mma" and record.get("config") is not None:
        m.update(_emulation_metrics(out, lse, oracle, record, built.valid_rows))
        if not m["vs_emu"] <= EMULATION_BAR:
            problems.append(f"vs_emu {m['vs_emu']:.3g} > {EMULATION_BAR:g} (emulation of the variant that ran)")
    if problems:
        res["status"] = "fail"
    return res


def _is_fatal(exc: BaseException) -> bool:
    return any(s in str(exc) for s in CUDA_FATAL)


# -- the CLI -------------------------------------------------------------------------------------


def available_kernels(device) -> list:
    """Named kernels that can run on ``device`` (no 'auto': it repeats one of them)."""
    tgt = target_of(device)
    names = []
    for name in ("fp8_mma", "mma16", "triton", "reference"):
        if BACKENDS[name].unavailable() is not None:
            continue
        if name in SM90_KERNELS and not tgt.is_sm90:
            continue
        if name == "triton" and tgt.device_type == "cpu" and not tgt.triton_interpreter:
            continue
        names.append(name)
    return names


def _compile_worker(kspec) -> tuple:
    t0 = time.perf_counter()
    try:
        compile_cache.get_kernel(kspec)
    except Exception as exc:  # the case that needs it reports the failure when it runs
        return kspec.key(), time.perf_counter() - t0, _error_line(exc)
    return kspec.key(), time.perf_counter() - t0, None


def precompile(specs: list, kernels: list, target, jobs: int) -> dict:
    """Compile the SM90 CuTe DSL kernels the cases will launch, ``jobs`` at a time, into the
    disk cache; the cases then load them (~0.1 s each) instead of compiling one by one.

    Which kernels a launch needs mirrors `fa512.cute_backend.Mma16Backend.launch`: the forward
    of ``config.with_split(splits > 1)``, the combine with splits, the V^T prepass. Returns
    {kernel key: compile error or None}."""
    KernelSpec = compile_cache.KernelSpec
    wanted = {}
    for spec in specs:
        call, _, _ = call_on(build(spec), "cpu")
        for kernel in kernels:
            try:
                p = fa512.plan(**call, kernel=kernel, target=target)
            except (fa512.KernelUnavailableError, ValueError):
                continue
            if p.kernel not in SM90_KERNELS:
                continue
            cfg = p.config.with_split(p.num_splits > 1)
            needed = [KernelSpec("fwd", cfg)]
            if p.num_splits > 1:
                needed.append(KernelSpec("combine", cfg.q_dtype))
            if cfg.vt_prepass:
                needed.append(KernelSpec("vt_prepass", cfg.page_size))
            wanted.update((ks.key(), ks) for ks in needed)
    if not wanted:
        return {}
    t0 = time.perf_counter()
    print(f"fuzz: compiling or loading {len(wanted)} SM90 kernels in {jobs} processes ...", file=sys.stderr, flush=True)
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_compile_worker, wanted.values()))
    bad = [r for r in results if r[2]]
    print(f"fuzz: {len(results)} kernels ready in {time.perf_counter() - t0:.1f} s"
          + (f"; {len(bad)} failed to compile (their cases will fail)" if bad else ""), file=sys.stderr, flush=True)
    return {key: err for key, _, err in results}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", type=int, default=200, help="number of cases, regression cases first (default 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of the case list (default 0)")
    p.add_argument("--case", default=None, help="run only case I (or a comma list) of --seed: the repro of a failure")
    p.add_argument("--variants", type=int, default=DEFAULT_VARIANTS,
                   help=f"compile-time variants the random cases draw from (default {DEFAULT_VARIANTS}; 0: no bound, "
                        "every case its own: many more kernel compiles on a GPU's first run)")
    p.add_argument("--kernel", default=None,
                   help=f"kernel(s), comma list of {', '.join(KERNELS)} (default: every named kernel available here)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--json", default=None, help="write every case's parameters and metrics to this file")
    p.add_argument("--jobs", type=int, default=0,
                   help="processes compiling the planned SM90 kernels first (default: one per core; 1: compile lazily)")
    p.add_argument("--dry-run", action="store_true", help="print the cases' descriptions only")
    p.add_argument("--verbose", "-v", action="store_true", help="one line per (case, kernel)")


def _summary(stats: dict, seed: int, n_cases: int, device, seconds: float) -> str:
    lines = [f"fuzz: seed {seed}, {n_cases} cases on {device}, {seconds:.1f} s",
             f"{'kernel':<10} {'cases':>5} {'pass':>5} {'refused':>7} {'skipped':>7} {'FAIL':>5} "
             f"{'rel_l2':>8} {'row':>8} {'lse':>8} {'vs_emu':>8} {'s':>7}"]
    for kernel, s in stats.items():
        worst = s["worst"]
        fmt = lambda k: f"{worst[k]:.1e}" if k in worst else "-"  # noqa: E731
        lines.append(f"{kernel:<10} {s['cases']:>5} {s['pass']:>5} {s['refused']:>7} {s['skipped']:>7} {s['fail']:>5} "
                     f"{fmt('rel_l2'):>8} {fmt('row_rel'):>8} {fmt('lse_err'):>8} {fmt('vs_emu'):>8} {s['seconds']:>7.1f}")
    for kernel, s in stats.items():
        for reason, count in sorted(s["reasons"].items(), key=lambda kv: -kv[1])[:4]:
            lines.append(f"  {kernel} {count}x: {reason}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print("fa512 fuzz: --device cuda: no CUDA GPU is visible", file=sys.stderr)
        return 2
    kernels = [k for k in args.kernel.split(",") if k] if args.kernel else available_kernels(device)
    bad = [k for k in kernels if k not in KERNELS]
    if bad or not kernels:
        print(f"fa512 fuzz: --kernel: got {bad or kernels}, expected names from {', '.join(KERNELS)}", file=sys.stderr)
        return 2
    indices = [int(x) for x in args.case.split(",") if x.strip()] if args.case else list(range(args.cases))
    specs = [make_spec(args.seed, i, args.variants) for i in indices]
    repro = f"python -m fa512 fuzz --seed {args.seed}" + (
        f" --variants {args.variants}" if args.variants != DEFAULT_VARIANTS else "")
    if args.dry_run:
        for spec in specs:
            print(f"case {spec.index}: {spec.describe()}")
        return 0
    if device.type == "cuda" and args.jobs != 1 and any(k in SM90_KERNELS + ("auto",) for k in kernels):
        precompile(specs, kernels, target_of(device), args.jobs or os.cpu_count() or 1)

    stats = {k: dict(cases=0, seconds=0.0, worst={}, reasons={}, **dict.fromkeys(("pass", "refused", "skipped", "fail"), 0))
             for k in kernels}
    records, failures = [], 0
    t_start = time.perf_counter()
    for spec in specs:
        built = build(spec)
        ref = fa512.attention_ref(**oracle_on(built, device))
        entry = {"index": spec.index, "describe": spec.describe(), "spec": asdict(spec), "results": {}}
        fatal = False
        for kernel in kernels:
            res = run_kernel(spec, built, kernel, device, ref)
            entry["results"][kernel] = res
            s = stats[kernel]
            s["cases"] += 1
            s["seconds"] += res.get("seconds", 0.0)
            s[res["status"]] += 1
            if "reason" in res:
                s["reasons"][res["reason"]] = s["reasons"].get(res["reason"], 0) + 1
            for key, val in res.get("metrics", {}).items():
                if key in ("rel_l2", "row_rel", "lse_err", "vs_emu") and math.isfinite(val):
                    s["worst"][key] = max(s["worst"].get(key, 0.0), val)
            if res["status"] == "fail":
                failures += 1
                print(f"FAIL {repro} --case {spec.index} --kernel {kernel}  "
                      f"# {spec.describe()}: {'; '.join(res['problems'])}", flush=True)
                fatal = fatal or res.get("fatal", False)
            elif args.verbose:
                note = res.get("reason") or " ".join(f"{k}={v:.2e}" for k, v in res.get("metrics", {}).items()
                                                     if k in ("rel_l2", "lse_err", "vs_emu"))
                print(f"{res['status']:<8} case {spec.index} {kernel}: {note}", flush=True)
        records.append(entry)
        if fatal:
            print(f"fuzz: stopping after case {spec.index}: the CUDA context is lost; rerun the line above alone",
                  file=sys.stderr)
            break
    seconds = time.perf_counter() - t_start
    print(_summary(stats, args.seed, len(records), device, seconds))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        report = {"tool": "fuzz", "seed": args.seed, "device": str(device), "kernels": kernels, "seconds": seconds,
                  "tolerances": {"/".join(k): asdict(v) for k, v in TOLERANCES.items()},
                  "emulation_bar": EMULATION_BAR, "summary": stats, "cases": records}
        with open(args.json, "w") as fh:
            json.dump(json_safe(report), fh, indent=1)
        print(f"wrote {args.json}")
    return 1 if failures else 0
