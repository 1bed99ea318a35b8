"""``python -m fa512 fuzz``: seeded random calls over the whole contract, each kernel against float64.

The cases (what they draw, the garbage, the seeding) are `fa512.tools.fuzz_cases`.

Checks per (case, kernel)
-------------------------
The call is ``fa512.attention(..., kernel=K)``; which kernel ran and its split count are read
from the op's launch record. Then, over the rows ``[0, cu_seqlens_q[B])``:
no NaN/Inf anywhere in out; rows with no visible key are out = 0 and lse = -inf, rows with one
are finite; rel L2 of out, the worst (row, head) rel L2 and the max lse error against the float64
reference within `TOLERANCES`; a given ``out``'s other rows and padding untouched; q, k, v and
the metadata unchanged. fp8_mma is compared (loosely) with the reference and, tightly
(`EMULATION_BAR`), with `fa512.numerics.emulation` of the variant and split count that ran.
``KernelUnavailableError`` and the documented TMA-alignment ValueError are refusals, counted per
kernel, not failures; the Triton interpreter skips bf16 cases (the interpreter computes bf16
wrongly: a known trap of the CPU toolchain). Any other exception is a failure. A CUDA error ends the run (the context is gone).

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
kernels for 150-500 cases in 16-32 s on 16 cores). Triton compiles each new specialisation on
first use (~1.5 s each: 236 s for 150 cases run in order, H200 2026-12-02), so with ``--jobs``
other than 1 a pool of GPU processes first runs each case's Triton call once, into Triton's own
disk cache. The cases are shared out by the forward kernel's compile key
(`triton_compile_key`), so no two processes compile the same specialisation. The kernels do
not specialise the scalar-load and loop-bound arguments (`triton_fwd._FWD_PLAIN_ARGS`,
`_COMBINE_PLAIN_ARGS`), and `triton_fwd.launch` copies a q view at an odd address into an aligned
one: 89 compiles for seed 0's 500 cases instead of 506 (123 before the q copy and the combine's
plain split stride; ``profiles/triton_specialisations.py``, CPU, 2026-12-04).
Cold, on a fresh H200 (2026-12-03), ``--cases 500 --kernel triton`` took 188 s: the pool 162.5 s
for 143 cache entries, the cases 15 s. Round-robin shares had taken 182.5 s for the same 143, so
the pool's time is the compiles themselves (~17 s each with 16 running at once), not repeats.
With the q copy and the plain split stride (H200 2026-12-04, first thing on a fresh machine):
170 s, the pool 149.5 s for 107 cache entries, the cases 12.1 s.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Callable

import torch

# Every fa512 import of this tool: the public API through ``fa512.``, then the internals it reads.
import fa512

from ..backends import compile_cache
from ..backends.cute import kernel_specs
from ..backends.registry import BACKENDS
from ..launch.run import last_launch
from ..numerics.emulation import emulate_attention, fp8_mma_design
from ..planning.dispatch import target_of
from .ab import json_safe
from .fuzz_cases import DEFAULT_VARIANTS, Built, Spec, build, call_on, make_spec, oracle_on, raw_bits

KERNELS = ("auto", "fp8_mma", "mma16", "triton", "reference")
SM90_KERNELS = ("fp8_mma", "mma16")



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
# fp8_mma against `fa512.numerics.emulation` of the variant that ran (FP8 wgmma accumulation modelled bit
# for bit): 0..2.2e-4 rel L2 on the H200 (README; this fuzzer: at most 1.3e-4 over 456 cases), so
# a kernel above 5e-4 does not compute what its design says...
EMULATION_BAR = 5e-4
# ... unless the emulation cannot tell: it computes P's exp2 exactly, the kernel with ex2.approx
# (2 ulp), and one P whose e4m3 rounding flips moves it 12.5%. Rows with few visible keys show a
# flip (seed 0 case 96, H200 2026-12-02: 20 queries, window [1, 55], vs_emu 5.32e-4, and the
# emulation itself moves 5.32e-4 under a 2-ulp exp2 error). So a case above the bar is held to
# EMULATION_BAR + that self-distance (`emulation_resolution`), which is recorded.
RESOLUTION_ULPS = 2
# ValueErrors that document a kernel's limit rather than bad input (fa512.backends.cute: TMA).
DOCUMENTED_LIMITS = ("16-byte aligned base address", "strides that are multiples of 16 bytes")
CUDA_FATAL = ("CUDA error", "illegal memory access", "unspecified launch failure", "CUBLAS_STATUS")

# -- running one kernel on one case --------------------------------------------------------------


def _traced(fn: Callable):
    """Run ``fn()`` and return (its result, the launch record: kernel, num_splits, config).

    The one place this module reads the record of the last eager call (`fa512.launch.run`)."""
    last_launch.clear()
    result = fn()
    return result, dict(last_launch)


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
    return torch.equal(raw_bits(a), raw_bits(b)) if a.is_floating_point() else torch.equal(a, b)


def _emulation_metrics(out, lse, oracle: dict, record: dict, rows: int) -> dict:
    """fp8_mma against `fa512.numerics.emulation` of the variant and split count that ran."""
    splits = max(1, int(record.get("num_splits") or 1))
    design = fp8_mma_design(record["config"].with_split(splits > 1))
    emu_out, emu_lse = emulate_attention(**oracle, num_splits=splits, design=design)
    ref = emu_out[:rows].double()
    m = {"vs_emu": float((out[:rows].double() - ref).norm()) / max(float(ref.norm()), 1e-30)}
    finite = torch.isfinite(emu_lse[:, :rows])
    m["lse_vs_emu"] = float((lse[:, :rows][finite] - emu_lse[:, :rows][finite]).abs().max()) if bool(finite.any()) else 0.0
    if not m["vs_emu"] <= EMULATION_BAR:
        m["emu_resolution"] = emulation_resolution(oracle, design, splits, ref, rows)
    return m


def emulation_resolution(oracle: dict, design, splits: int, emu_out: torch.Tensor, rows: int) -> float:
    """Rel L2 between the emulation and itself with P's exp2 off by up to RESOLUTION_ULPS ulp (the
    kernels' ex2.approx error, `Design.exp2_ulps`): how finely the emulation resolves this case."""
    other, _ = emulate_attention(**oracle, num_splits=splits, design=replace(design, exp2_ulps=RESOLUTION_ULPS))
    diff = other[:rows].double() - emu_out
    return float(diff.norm()) / max(float(emu_out.norm()), 1e-30)


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
        if bool(((raw_bits(out_base) != raw_bits(out_before)) & ~built.out_owned.to(device)).any()):
            problems.append("wrote outside the given out's valid rows")
    changed = [n for n, t in before.items() if not _same(t, call[n])]
    if changed:
        problems.append(f"modified its inputs: {', '.join(changed)}")
    if res["ran"] == "fp8_mma" and record.get("config") is not None:
        m.update(_emulation_metrics(out, lse, oracle, record, built.valid_rows))
        bar = EMULATION_BAR + m.get("emu_resolution", 0.0)
        if not m["vs_emu"] <= bar:
            problems.append(f"vs_emu {m['vs_emu']:.3g} > {bar:.3g} (emulation of the variant that ran; "
                            f"{EMULATION_BAR:g} + its resolution {m.get('emu_resolution', 0.0):.3g})")
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


def case_plans(specs: list, kernels: list, target):
    """(spec, plan) for each case and kernel that plans it on ``target`` (CPU tensors; refusals
    and bad calls skipped): what the GPU warm-ups need to know before any case runs."""
    for spec in specs:
        call, _, _ = call_on(build(spec), "cpu")
        for kernel in kernels:
            try:
                yield spec, fa512.plan(**call, kernel=kernel, target=target)
            except (fa512.KernelUnavailableError, ValueError):
                continue


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

    Which kernels a launch needs is `fa512.backends.cute.kernel_specs`. Returns {kernel key:
    compile error or None}."""
    wanted = {}
    for _, p in case_plans(specs, kernels, target):
        if p.kernel in SM90_KERNELS:
            wanted.update((ks.key(), ks) for ks in kernel_specs(p.config, p.num_splits, fused=p.combine == "fused")
                          if ks is not None)
    stored = [key for key, ks in wanted.items() if compile_cache.is_stored(ks)]
    for key in stored:  # the cases load these (~0.1 s each): no pool for them
        del wanted[key]
    if not wanted:
        if stored:
            print(f"fuzz: all {len(stored)} SM90 kernels are in the disk cache", file=sys.stderr, flush=True)
        return dict.fromkeys(stored)
    t0 = time.perf_counter()
    print(f"fuzz: compiling {len(wanted)} SM90 kernels in {jobs} processes ({len(stored)} in the disk cache) ...",
          file=sys.stderr, flush=True)
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_compile_worker, wanted.values()))
    bad = [r for r in results if r[2]]
    print(f"fuzz: {len(results)} kernels ready in {time.perf_counter() - t0:.1f} s"
          + (f"; {len(bad)} failed to compile (their cases will fail)" if bad else ""), file=sys.stderr, flush=True)
    return {**dict.fromkeys(stored), **{key: err for key, _, err in results}}


def _triton_warm_worker(job: tuple) -> int:
    """Run the Triton call of some cases once, results discarded: Triton's own disk cache then
    holds their specialisations when the cases run in order. Returns how many calls ran."""
    seed, indices, variants, device = job
    device = torch.device(device)
    ran = 0
    for index in indices:
        call, _, _ = call_on(build(make_spec(seed, index, variants)), device)
        try:
            fa512.attention(**call, kernel="triton")
            ran += 1
        except Exception:  # noqa: BLE001 - the case reports it when it runs in order
            pass
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return ran


def triton_cache_entries() -> int:
    """Entries in Triton's disk cache (one directory per compiled kernel and a few per-run
    helpers), -1 when it cannot be found: the difference across a run counts its compiles."""
    try:
        from triton import knobs

        path = knobs.cache.dir
    except (ImportError, AttributeError):
        path = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    try:
        return len(os.listdir(path))
    except OSError:
        return -1


def triton_compile_key(p) -> tuple:
    """What a Triton plan's forward kernel is compiled for, as far as the host sees it: the
    config's compile-time fields, the constexprs `backends.triton_fwd.launch` derives from the
    problem, and the dtypes. Triton also specialises on pointer and stride alignment, so one
    key can stand for several compiles, never the reverse. (The split combine, a small kernel
    with few variants, is left out.)"""
    c, pr = p.config, p.problem
    return (c.block_m, c.block_n, c.num_warps, c.num_stages, c.q_to_fp16, c.lazy_rescale,
            pr.q_dtype, pr.kv_dtype, pr.group_size, pr.page_size if pr.paged else 0,
            pr.window_left >= 0, pr.window_right >= 0, tuple(m != "none" for m in pr.descale_modes),
            int(p.num_splits) > 1)


def triton_shares(specs: list, target, jobs: int) -> list:
    """The case indices for the warm pool's ``jobs`` processes: cases with one
    `triton_compile_key` go to one process, so a specialisation compiles once, not in every
    process whose share needs it (round-robin shares did: 143 kernels in 182 s on 16 processes,
    H200 2026-12-02). Groups are dealt largest first to the least loaded share, a group
    weighing one compile plus a little per case. Cases Triton refuses are left out."""
    groups = {}
    for spec, p in case_plans(specs, ["triton"], target):
        groups.setdefault(triton_compile_key(p), []).append(spec.index)
    shares = [[] for _ in range(max(1, min(jobs, len(groups))))]
    load = [0.0] * len(shares)
    for members in sorted(groups.values(), key=len, reverse=True):
        j = load.index(min(load))
        shares[j] += members
        load[j] += 1.0 + 0.05 * len(members)
    return [share for share in shares if share]


def warm_triton(seed: int, specs: list, variants: int, target, jobs: int) -> None:
    """Compile the cases' Triton specialisations in up to ``jobs`` GPU processes (shares from
    `triton_shares`), so that a first run does not compile them one by one (~1.5 s each).
    Prints the time and how many entries Triton's disk cache gained (its compiles)."""
    shares = triton_shares(specs, target, jobs)
    if not shares:
        return
    t0, before = time.perf_counter(), triton_cache_entries()
    print(f"fuzz: compiling the Triton specialisations of {sum(map(len, shares))} cases in {len(shares)} processes "
          f"(Triton disk cache: {before} entries) ...", file=sys.stderr, flush=True)
    with ProcessPoolExecutor(len(shares), mp_context=multiprocessing.get_context("spawn")) as pool:
        ran = sum(pool.map(_triton_warm_worker, [(seed, share, variants, "cuda") for share in shares]))
    print(f"fuzz: {ran} Triton calls warm in {time.perf_counter() - t0:.1f} s; Triton disk cache "
          f"{before} -> {triton_cache_entries()} entries", file=sys.stderr, flush=True)


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
                   help="processes compiling first the planned SM90 kernels and the cases' Triton specialisations "
                        "(default: one per core; 1: compile lazily, in order)")
    p.add_argument("--dry-run", action="store_true", help="print the cases' descriptions only")
    p.add_argument("--prepare-only", action="store_true",
                   help="compile the cases' kernels into the disk caches (SM90 and Triton) and stop: one pool for "
                        "several later runs of the same cases, e.g. one per kernel side by side")
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
    if device.type == "cuda" and args.jobs != 1 and "triton" in kernels and len(indices) > 1:
        warm_triton(args.seed, specs, args.variants, target_of(device), args.jobs or os.cpu_count() or 1)
    if args.prepare_only:
        # The later runs' own precompile then only loads (~0.1 s a kernel); four runs side by
        # side that each compiled with a pool per core thrashed 16 cores for >590 s (H100,
        # 2026-12-07) where one run of the four kernels took 482 s.
        print(f"fuzz: prepared {len(specs)} cases of {', '.join(kernels)} on {device}", flush=True)
        return 0

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
