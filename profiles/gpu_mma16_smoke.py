"""GPU smoke, correctness and first timings of the SM90 CuTe DSL d512 forward (`mma16`).

Run on an H100/H200 from the repository root::

    PYTHONPATH=python:. python profiles/gpu_mma16_smoke.py [--quick] [--no-perf] [--ab] [--out out/smoke]

What it does, in order (small before large, so a failure shows up early and cheaply):

1. correctness cases vs the float64 reference (`fa512.numerics.reference.attention_ref`), bf16 and fp16,
   masks none/causal/local, packed and paged K/V, GQA packing, varlen, empty rows/sequences,
   descales, splits 1..32 + combine, Gemma-4 head shapes (Hq=32/Hkv=4, 16/2, 8/1);
2. a CUDA-graph capture of a split decode step replayed with new seqused_k values;
3. timings: causal prefill of 8192 tokens (Hq=32, Hkv=4, bf16) against a bf16 GEMM ceiling,
   decode B=64 x 8192 keys against copy bandwidth, host launch overhead; ``--ab`` also times
   tile_n=32 x 2 stages. Every timing is the median call
   over 0.2 s of GPU time after 0.1 s of warm-up (`time_cuda`), and each case's ceiling is
   timed the same way right before and right after it (the H200 clocks down under load).

Hang safety: every case runs in a worker process that prints ``@@START`` (flushed) before it
launches anything and ``@@STEP build|compile|launch|wait|check`` as it goes, so a hang is placed
in compilation/loading, the launch path or the kernel. A launched kernel that has not finished
after ``--kernel-timeout`` s makes the worker print ``@@KERNEL_HANG`` (with the trace heartbeat
under ``--trace``) and exit; ``faulthandler`` dumps the worker's Python stacks before the
parent's ``--timeout``; the parent kills a worker that stays silent past ``--timeout`` seconds,
records the case as HANG and restarts a worker at the next case. Everything a worker prints is
echoed (``    | ``) and kept in ``<out>/worker_logs/<case>.log``. Compiled kernels go to the
disk cache (FA512_CACHE_DIR), so restarts do not recompile.

Diagnosis of a hang (``--diag``): one tiny launch per diagnostic cut of the kernel
(`Sm90FwdConfig.stage`), each in its own worker with short timeouts, in order

    diag_launch   the kernel returns at once: tvm-ffi call, TMA descriptors, stream, launch
    diag_setup    + smem, mbarrier init, CTA barrier, setmaxnreg dec/inc (the 2026-11-29 hang)
    diag_full     the kernel, checked against the reference (1 key block)
    diag_full_loop / diag_full_split2 / diag_n32_s2 / diag_fp8_dequant: the steady-state loop,
                  the combine kernel, two-stage rings, the dequant path (all checked)

and prints which cut first hangs or fails. (The cuts inside the roles' loops, "load" and "qk",
are gone since issue 20, last in 5962547; past setup, ``--trace`` places a hang.)
``--trace`` compiles the cuts with ``cfg.trace``: the
kernel writes per-warp progress of CTA (0, 0, 0) to host-mapped memory, which the worker reads
and decodes while the kernel hangs (which warp waits for what, at which block and stage), plus
device printf of warps 0/4/8 (flushed only if the kernel completes). First commands on a GPU::

    PYTHONPATH=python:. python3 profiles/gpu_mma16_smoke.py --diag --timeout 180 --kernel-timeout 20
    PYTHONPATH=python:. python3 profiles/gpu_mma16_smoke.py --diag --trace --timeout 180 --kernel-timeout 20
    PYTHONPATH=python:. python3 profiles/gpu_mma16_smoke.py --quick --no-perf --timeout 180

compute-sanitizer on one case, in-process (``--inline`` runs the named case without a worker;
sanitized kernels are ~100x slower, hence the long kernel timeout)::

    PYTHONPATH=python:. timeout 900 compute-sanitizer --tool synccheck \
        python3 profiles/gpu_mma16_smoke.py --diag --inline --case diag_full_loop --kernel-timeout 600
    PYTHONPATH=python:. timeout 900 compute-sanitizer --tool racecheck --racecheck-report all \
        python3 profiles/gpu_mma16_smoke.py --diag --inline --case diag_full_loop --kernel-timeout 600
    PYTHONPATH=python:. timeout 900 compute-sanitizer --tool memcheck \
        python3 profiles/gpu_mma16_smoke.py --diag --inline --case diag_full_split2 --kernel-timeout 600

Tolerances: rel L2 of out <= 3e-3 (bf16 P) / 2e-3 (fp16 compute: fp16 Q/KV, and fp8 KV
dequantised to f16); |lse - ref| <= 1e-3; empty rows must give out = 0 and lse = -inf. The
reference is fed the same (fp8) K/V values. Exit status 0 iff every case passed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

TOL_OUT = {"bf16": 3e-3, "f16": 2e-3}  # rel L2 of out vs the float64 reference
TOL_LSE = 1e-3
TOL_EMU = 5e-4  # fp8_mma: rel L2 of out vs the emulation of its own numerics (issue 5)


# fp8_mma's long-context guard forced on for a short sequence (the dispatch turns it on from
# cute_kernels.variants.PV_PROMOTE_MIN_KEYS keys): the A/B of its cost
PROMOTED = dict(pv_promote=True, producer_regs=24, consumer_regs=240, layout="split_d")
# decode tiles on the split-d layout, without the k-steps in their spare M rows (the dispatch's
# one-tile variant; its decode before Sm90FwdConfig.qk_rows): the A/B of the decode layout's
# cost and accuracy
NO_QK_ROWS = dict(layout="split_d")
# fp8_mma's split-d layout (the dispatch's choice for one-tile calls), forced where the dispatch
# picks another layout
SPLIT_D = dict(layout="split_d", pv_promote=False, producer_regs=40, consumer_regs=232)


def fp8_mma_cases(quick: bool) -> list[dict]:
    """``--fp8``: the FP8-MMA kernel against `fa512.numerics.emulation` (design fa512_fp8) and the reference."""
    c = []
    add = lambda name, **kw: c.append(dict(name=name, kind="check", kernel="fp8_mma", kv="fp8", **kw))  # noqa: E731
    add("fp8mma_tiny_one_block", hq=8, hkv=1, q_lens=[64], k_lens=[64], page_size=64)
    add("fp8mma_loop", hq=8, hkv=1, q_lens=[64], k_lens=[640], page_size=64)
    add("fp8mma_causal_varlen", q_lens=[200, 77, 1], k_lens=[200, 300, 50], causal=True, page_size=64, descale=True)
    add("fp8mma_chunked", q_lens=[65], k_lens=[1000], causal=True, page_size=64)
    add("fp8mma_local", q_lens=[150], k_lens=[400], window=[100, 3], page_size=64)
    add("fp8mma_packed_f16", dtype="f16", q_lens=[40, 9], k_lens=[900, 130])
    # >= VT_PREPASS_MIN_M_TILES M tiles: V^T from the prepass (paged: causal_varlen, local), packed here
    add("fp8mma_packed_prefill_vtp", dtype="f16", q_lens=[300, 150], k_lens=[300, 700], causal=True, descale=True)
    add("fp8mma_prefill_vtp_split3", q_lens=[128, 200], k_lens=[1500, 900], causal=True, page_size=64, splits=3)
    add("fp8mma_empty_rows", q_lens=[3, 0, 4], k_lens=[0, 10, 2], page_size=64)
    add("fp8mma_decode_split4", q_lens=[1, 1, 1], k_lens=[1000, 5, 64], page_size=64, splits=4, descale=True)
    add("fp8mma_page32", q_lens=[90], k_lens=[500], window=[128, 0], page_size=32)
    add("fp8mma_no_pack_g1", hq=4, hkv=4, q_lens=[70], k_lens=[300], causal=True, page_size=64)
    # >= PV_PROMOTE_MIN_KEYS keys without splits: decode tiles take qk_rows instead of the
    # promoted P.V (causal = no mask); a sequence of 4 queries (32 rows) keeps the promotion
    add("fp8mma_decode_long", q_lens=[1, 1], k_lens=[20000, 17000], causal=True, page_size=64, descale=True)
    add("fp8mma_decode_long_q4", q_lens=[4, 1], k_lens=[20000, 17000], causal=True, page_size=64, descale=True)
    add("fp8mma_decode_local_qkrows", q_lens=[1, 1, 1], k_lens=[900, 70, 3000], window=[300, 0], page_size=64)
    if not quick:
        add("fp8mma_gemma31b_prefill2048", q_lens=[2048], k_lens=[2048], causal=True, page_size=64, descale=True,
            logit_std=4.0, softmax_scale=1.0)
        add("fp8mma_gemma26b_chunked", hq=16, hkv=2, q_lens=[512, 300], k_lens=[4096, 1000], causal=True,
            page_size=64)
        add("fp8mma_gemma31b_noncausal4096", q_lens=[256], k_lens=[4096], page_size=64, logit_std=3.0)
        add("fp8mma_gemma31b_decode_split32", q_lens=[1] * 4, k_lens=[32768, 20000, 3, 0], page_size=64,
            splits=32, descale=True)
        add("fp8mma_e2b_decode32k", hq=8, hkv=1, q_lens=[1] * 2, k_lens=[32768, 32768], page_size=64)
        add("fp8mma_decode_128k", hq=8, hkv=1, q_lens=[1], k_lens=[131072], page_size=64, logit_std=1.0)
        add("fp8mma_decode_128k_split16", hq=8, hkv=1, q_lens=[1], k_lens=[131072], page_size=64, splits=16,
            logit_std=1.0)
        # the same 128k decode with P.V accumulated on the tensor core (no promotion): the A/B
        add("fp8mma_decode_128k_unguarded", hq=8, hkv=1, q_lens=[1], k_lens=[131072], page_size=64, logit_std=1.0,
            config=dict(pv_promote=False))
    # the split-d layout forced where the dispatch picks another (alternating prefill, decode
    # tiles): it has the same numerics model (per-half Q scales and FP8 accumulations summed in
    # fp32), so it is checked against the same emulation
    add("fp8mma_splitd_causal_varlen", q_lens=[200, 77, 1], k_lens=[200, 300, 50], causal=True, page_size=64,
        descale=True, config=SPLIT_D)
    add("fp8mma_splitd_local", q_lens=[150], k_lens=[400], window=[100, 3], page_size=64, config=SPLIT_D)
    add("fp8mma_splitd_decode_split4", q_lens=[1, 1, 1], k_lens=[1000, 5, 64], page_size=64, splits=4,
        descale=True, config=SPLIT_D)
    add("fp8mma_splitd_noncausal_empty", q_lens=[3, 0, 70], k_lens=[0, 10, 900], page_size=64, config=SPLIT_D)
    # the retrieval probe (fa512.tools.inputs, 31B heads, one query), beside the anchor design's emulation
    for keys in (32768,) if quick else (32768, 131072):
        for std in (1.0, 2.0):
            add(f"fp8mma_retrieval{keys // 1024}k_std{std:g}", family="retrieval", seqlen_k=keys, logit_std=std)
            # the decode tile on the split-d layout (the dispatch uses the decode layout here)
            add(f"fp8mma_retrieval{keys // 1024}k_std{std:g}_noqkrows", family="retrieval", seqlen_k=keys,
                logit_std=std, config=NO_QK_ROWS)
    c.append(dict(name="fp8mma_cuda_graph_decode_split8", kind="graph", kernel="fp8_mma", kv="fp8"))
    return c


def _prefill8k(name: str, **kw) -> dict:
    """Causal prefill of 8192 tokens (31B heads, paged fp8 KV with descales): the prefill timing shape."""
    return dict(name=name, kind="perf", kv="fp8", q_lens=[8192], k_lens=[8192], causal=True, page_size=64,
                descale=True, **kw)


def _decode(name: str, batch: int, keys: int, **kw) -> dict:
    """Decode, one query per sequence (paged fp8 KV with descales): the bandwidth timing shapes."""
    return dict(name=name, kind="perf", kv="fp8", q_lens=[1] * batch, k_lens=[keys] * batch, page_size=64,
                descale=True, **kw)


def fp8_perf_cases() -> list[dict]:
    mma = dict(kernel="fp8_mma")
    split = dict(kernel="fp8_mma", splits="plan")
    n32 = dict(tile_n=32, kv_stages=4)
    return [
        dict(name="ceiling_fp8_gemm_8192", kind="gemm_fp8"),
        dict(name="ceiling_copy_bandwidth", kind="copy"),
        _prefill8k("perf_prefill8192_causal_fp8_mma", **mma),
        _decode("perf_decode_b64_k8192_fp8_mma", 64, 8192, **mma),
        _decode("perf_decode_b4_k32768_fp8_mma_split", 4, 32768, **split),
        _decode("ab_decode_b64_k8192_fp8_mma_noqkrows", 64, 8192, **mma, config=NO_QK_ROWS),
        _decode("ab_decode_b4_k32768_fp8_mma_split_noqkrows", 4, 32768, **split, config=NO_QK_ROWS),
        _decode("ab_decode_b4_k32768_fp8_mma_n32s4", 4, 32768, **split, config=n32),
        # split counts other than the plan's (8 for 16 m-blocks on 132 SMs)
        *[_decode(f"ab_decode_b4_k32768_fp8_mma_s{n}", 4, 32768, kernel="fp8_mma", splits=n) for n in (4, 12, 16, 24, 32)],
        _decode("ab_decode_b4_k32768_fp8_mma_s16_noqkrows", 4, 32768, kernel="fp8_mma", splits=16, config=NO_QK_ROWS),
        _decode("ab_decode_b64_k8192_fp8_mma_n32s4", 64, 8192, **mma, config=n32),
        _prefill8k("perf_prefill8192_causal_fp8_dequant"),
        _decode("perf_decode_b64_k8192_fp8_dequant", 64, 8192),
        _prefill8k("ab_prefill8192_causal_fp8_mma_splitd", **mma, config=SPLIT_D),
        # chunks of 16 M tiles per sequence (fewer below) and a shorter prefill: the alternating
        # warpgroups on the prepass's V^T, against the split-d layout's in-kernel transpose
        *[dict(name=f"ab_chunk{q}x4_k8192_fp8_mma_{tag}", kind="perf", kv="fp8", q_lens=[q] * 4, k_lens=[8192] * 4,
               causal=True, page_size=64, descale=True, **mma, config=cfg)
          for q in (16, 32, 64, 128) for tag, cfg in (("vtp", None), ("splitd", SPLIT_D))],
        dict(name="ab_prefill2048_fp8_mma_vtp", kind="perf", kv="fp8", q_lens=[2048], k_lens=[2048], causal=True,
             page_size=64, descale=True, **mma),
        _prefill8k("ab_prefill8192_causal_fp8_mma_promoted", **mma, config=PROMOTED),
        _decode("ab_decode_b64_k8192_fp8_mma_promoted", 64, 8192, **mma, config=PROMOTED),
    ]


# ---------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------
def correctness_cases(quick: bool) -> list[dict]:
    c = []
    add = lambda name, **kw: c.append(dict(name=name, kind="check", **kw))  # noqa: E731
    add("tiny_one_block", hq=8, hkv=1, q_lens=[64], k_lens=[64])
    add("small_full", q_lens=[130], k_lens=[130])
    add("small_causal", q_lens=[130], k_lens=[130], causal=True)
    add("varlen_causal", q_lens=[200, 77, 1], k_lens=[200, 300, 50], causal=True)
    add("chunked_causal", q_lens=[65], k_lens=[1000], causal=True)
    add("local_window", q_lens=[150], k_lens=[400], window=[100, 3])
    add("local_left_only", q_lens=[90], k_lens=[300], window=[64, -1])
    add("q_longer_than_k_causal", q_lens=[100], k_lens=[40], causal=True)
    add("empty_rows_and_seqs", q_lens=[3, 0, 4], k_lens=[0, 10, 2])
    add("decode_paged64", q_lens=[1, 1, 1], k_lens=[1000, 5, 64], page_size=64)
    add("decode_paged64_split4", q_lens=[1, 1, 1], k_lens=[1000, 5, 64], page_size=64, splits=4)
    add("paged128_causal_split3", q_lens=[70], k_lens=[700], page_size=128, causal=True, splits=3)
    add("fp16_descale", dtype="f16", q_lens=[33], k_lens=[333], descale=True)
    add("fp16_local_paged_split2", dtype="f16", q_lens=[50, 20], k_lens=[500, 90], window=[200, 0],
        page_size=64, splits=2)
    add("no_gqa_pack_g8x1", hq=8, hkv=1, q_lens=[40], k_lens=[260], causal=True)
    add("fp8_dequant_paged_causal", kv="fp8", q_lens=[70, 1], k_lens=[700, 333], page_size=64, causal=True,
        descale=True)
    add("fp8_dequant_packed_split3", kv="fp8", dtype="f16", q_lens=[40], k_lens=[900], splits=3, descale=True)
    add("fp8_dequant_local", kv="fp8", q_lens=[90], k_lens=[500], window=[128, 0], page_size=32)
    add("fp8_dequant_empty_rows", kv="fp8", q_lens=[3, 0, 4], k_lens=[0, 10, 2])
    add("fp8_dequant_prefill2048", kv="fp8", q_lens=[2048], k_lens=[2048], causal=True, page_size=64,
        descale=True, logit_std=4.0, softmax_scale=1.0)
    if not quick:
        add("gemma31b_prefill2048_causal", q_lens=[2048], k_lens=[2048], causal=True, logit_std=4.0,
            softmax_scale=1.0)
        add("gemma26b_chunked", hq=16, hkv=2, q_lens=[512, 300], k_lens=[4096, 1000], causal=True, page_size=64)
        add("gemma_e2b_decode_split8", hq=8, hkv=1, q_lens=[1] * 8, k_lens=[4096] * 8, page_size=64, splits=8)
        add("gemma31b_decode_split32", q_lens=[1] * 4, k_lens=[32768, 20000, 3, 0], page_size=64, splits=32)
        add("gemma31b_long_local", q_lens=[1024], k_lens=[16384], window=[1023, 0], page_size=128)
        add("gemma31b_fp8_prefill2048", kv="fp8", q_lens=[2048], k_lens=[2048], causal=True, page_size=64,
            descale=True, logit_std=4.0, softmax_scale=1.0)
        add("gemma31b_fp8_decode_split16", kv="fp8", q_lens=[1] * 4, k_lens=[32768, 9000, 64, 1], page_size=64,
            splits=16, descale=True)
    c.append(dict(name="cuda_graph_decode_split8", kind="graph"))
    return c


def diag_cases() -> list[dict]:
    """Stage bisection of a hang: the smallest launch, cut after each protocol layer."""
    tiny = dict(hq=8, hkv=1, q_lens=[64], k_lens=[64])  # one CTA row of 8 M tiles, one 64-key block
    c = [dict(name=f"diag_{st}", kind="diag", stage=st, **tiny) for st in ("launch", "setup", "full")]
    c += [
        dict(name="diag_full_loop", kind="diag", stage="full", hq=8, hkv=1, q_lens=[64], k_lens=[200]),
        dict(name="diag_full_split2", kind="diag", stage="full", hq=8, hkv=1, q_lens=[1], k_lens=[300],
             page_size=64, splits=2),
        dict(name="diag_n32_s2", kind="diag", stage="full", hq=8, hkv=1, q_lens=[64], k_lens=[200],
             config=dict(tile_n=32, kv_stages=2)),
        dict(name="diag_fp8_dequant", kind="diag", stage="full", kv="fp8", hq=8, hkv=1, q_lens=[64], k_lens=[200],
             page_size=64, descale=True),
    ]
    # fp8_mma: 64 queries x G=8 span 8 M tiles (the dispatch alternates the warpgroups); the
    # split-d layout with its in-kernel V^T forced
    fp8 = dict(kind="diag", kernel="fp8_mma", kv="fp8", hq=8, hkv=1, q_lens=[64], k_lens=[200], page_size=64)
    c += [dict(name=f"diag_fp8_mma_{st}", stage=st, config=SPLIT_D, **fp8) for st in ("setup", "full")]
    # 128 queries x G=8 = 16 M tiles: V^T from the prepass (two kernels), the warpgroups alternating, causal
    c += [dict(name="diag_fp8_mma_vtp", stage="full", causal=True, **{**fp8, "q_lens": [128]})]
    # decode tiles (one query x G=8): the k-steps in the spare M rows (Sm90FwdConfig.qk_rows), 5 blocks
    c += [dict(name="diag_fp8_mma_qkrows", stage="full", **{**fp8, "q_lens": [1, 1], "k_lens": [300, 70]})]
    return c


def perf_cases(ab: bool) -> list[dict]:
    c = [
        dict(name="ceiling_bf16_gemm_8192", kind="gemm"),
        dict(name="ceiling_copy_bandwidth", kind="copy"),
        dict(name="perf_prefill8192_causal_bf16", kind="perf", q_lens=[8192], k_lens=[8192], causal=True),
        dict(name="perf_decode_b64_k8192_bf16", kind="perf", q_lens=[1] * 64, k_lens=[8192] * 64, page_size=64),
        dict(name="perf_decode_b4_k32768_split", kind="perf", q_lens=[1] * 4, k_lens=[32768] * 4, page_size=64,
             splits=16),
        _prefill8k("perf_prefill8192_causal_fp8_dequant"),
        _decode("perf_decode_b64_k8192_fp8_dequant", 64, 8192),
        dict(name="launch_overhead", kind="overhead"),
    ]
    if ab:
        c += [
            dict(name="ab_prefill8192_n32_s2", kind="perf", q_lens=[8192], k_lens=[8192], causal=True,
                 config=dict(tile_n=32, kv_stages=2)),
            dict(name="ab_decode_b64_n32_s2", kind="perf", q_lens=[1] * 64, k_lens=[8192] * 64, page_size=64,
                 config=dict(tile_n=32, kv_stages=2)),
        ]
    return c


# ---------------------------------------------------------------------------------------
# worker side
# ---------------------------------------------------------------------------------------
def build(case: dict, seed: int = 0):
    """Inputs on the GPU: Gaussian q/k/v with logit std ``logit_std``, random page table; with
    ``family``, `fa512.tools.inputs.make_case` (31B heads, one decode query, paged fp8 KV)."""
    import torch

    if case.get("family"):
        from fa512.tools.inputs import make_case

        made = make_case(case["family"], heads="31B", mode="decode", seqlen_k=case["seqlen_k"],
                         logit_std=case.get("logit_std"), seed=seed, device="cuda")
        kw = made.kwargs()
        kw["case"] = made  # popped by the worker (needle weights)
        return made.q, made.k, made.v, kw

    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[case.get("dtype", "bf16")]
    kv_dtype = torch.float8_e4m3fn if case.get("kv") == "fp8" else dtype
    hq, hkv = case.get("hq", 32), case.get("hkv", 4)
    q_lens, k_lens = case["q_lens"], case["k_lens"]
    page_size = case.get("page_size", 0)
    scale = case.get("softmax_scale", 1 / math.sqrt(512))
    q_std = case.get("logit_std", 3.0) / (scale * math.sqrt(512))
    g = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"
    b, total_q = len(q_lens), sum(q_lens)
    q = (torch.randn(total_q, hq, 512, generator=g, device=dev) * q_std).to(dtype)
    cu_q = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    kw = dict(
        cu_seqlens_q=cu_q, seqused_k=torch.tensor(k_lens, dtype=torch.int32, device=dev),
        max_seqlen_q=max(q_lens), max_seqlen_k=max(max(k_lens), 1), causal=case.get("causal", False),
        window_left=case.get("window", [-1, -1])[0], window_right=case.get("window", [-1, -1])[1],
        softmax_scale=scale,
    )
    if page_size:
        per_seq = max(1, -(-max(k_lens) // page_size))
        num_pages = b * per_seq + 5
        k = torch.randn(num_pages, page_size, hkv, 512, generator=g, device=dev).to(kv_dtype)
        v = torch.randn(num_pages, page_size, hkv, 512, generator=g, device=dev).to(kv_dtype)
        perm = torch.randperm(num_pages, generator=g, device=dev)
        kw["page_table"] = perm[: b * per_seq].view(b, per_seq).int()
    else:
        total_k = sum(k_lens) + 11
        k = torch.randn(total_k, hkv, 512, generator=g, device=dev).to(kv_dtype)
        v = torch.randn(total_k, hkv, 512, generator=g, device=dev).to(kv_dtype)
        starts = [0]
        for n in k_lens:
            starts.append(starts[-1] + n)
        kw["cu_seqlens_k"] = torch.tensor(starts, dtype=torch.int32, device=dev)
    if case.get("descale"):
        kw["q_descale"] = torch.rand(b, hkv, generator=g, device=dev) + 0.5
        kw["k_descale"] = torch.rand(hkv, generator=g, device=dev) + 0.5
        kw["v_descale"] = torch.tensor(1.7, device=dev)
    return q, k, v, kw


def prepare(q, k, v, kw, num_splits, config_changes=None, kernel: str = "mma16"):
    """validate -> (backend, plan, args) for the SM90 kernel ``kernel`` (mma16 | fp8_mma).

    ``num_splits``: an int, or "plan" for the split count `fa512.planning.dispatch.make_plan` picks.
    """
    import torch

    from fa512.backends.registry import BACKENDS
    from fa512.planning.dispatch import make_plan, target_of
    from fa512.call import Call
    from fa512.planning.validate import check
    backend = BACKENDS[kernel]
    target = target_of(q.device)
    problem, args = check(Call(
        q, k, v, None, kw.get("page_table"), kw.get("cu_seqlens_k"), kw["cu_seqlens_q"], kw["max_seqlen_q"],
        kw["seqused_k"], kw["max_seqlen_k"], kw["softmax_scale"], kw["causal"], kw["window_left"],
        kw["window_right"], kw.get("q_descale"), kw.get("k_descale"), kw.get("v_descale"), 0, kernel,
    ))
    if num_splits == "plan":
        num_splits = make_plan(problem, target, kernel, 0).num_splits
    why = backend.unavailable() or backend.unsupported(problem, target)
    if why:
        raise RuntimeError(f"{kernel} refuses this case: {why}")
    config = backend.make_config(problem, target)
    if config_changes:
        config = config.with_(**config_changes)
    # combine (`Plan.combine`, which launch_state and precompile read): the combine kernel for
    # splits, as before the fused combine, unless config_changes ask for fused_combine
    combine = "none" if num_splits <= 1 else "fused" if config.fused_combine else "kernel"
    plan = SimpleNamespace(problem=problem, config=config, num_splits=num_splits, combine=combine)
    out = torch.empty_like(q)
    return backend, plan, args, out


def tolerance(case: dict) -> float:
    """fp16 compute (fp16 Q/KV, or fp8 KV dequantised to f16) 2e-3; bf16 P 3e-3 (issue 4)."""
    return 2e-3 if case.get("kv") == "fp8" else TOL_OUT[case.get("dtype", "bf16")]


def compare_fp8_mma(q, k, v, kw, out, lse, num_splits: int, config, made=None) -> dict:
    """fp8_mma against the emulation of its numerics (<= TOL_EMU) and, reported, the reference.

    The emulation is that of the variant that ran (``config``, its `Sm90FwdConfig`:
    `fa512.numerics.emulation.fp8_mma_design`): its key block, its guards and FP8 wgmma's accumulation as
    the H200 does it. With ``made`` (an `fa512.tools.inputs.Case`) it also reports the anchor design's
    emulation against the reference, with exact and with H200 accumulation, and the needle weights
    (retrieval probe).
    """
    import torch

    from fa512.numerics.emulation import anchor_on_h200_design, emulate_attention, fp8_mma_design, make_design
    from fa512.tools.inputs import needle_weights
    from fa512.numerics.reference import attention_ref

    emu_out, emu_lse = emulate_attention(q, k, v, **kw, design=fp8_mma_design(config), num_splits=num_splits)
    ref_out, ref_lse = attention_ref(q, k, v, **kw)
    ref = compare(q, k, v, kw, out, lse, tol=float("inf"), lse_tol=float("inf"), ref_out=ref_out, ref_lse=ref_lse)
    emu = compare(q, k, v, kw, out, lse, TOL_EMU, ref_out=emu_out.double(), ref_lse=emu_lse.double())
    res = dict(ok=emu["ok"], rel_l2=emu["rel_l2"], lse_err=emu["lse_err"], ref_rel_l2=ref["rel_l2"],
               ref_lse_err=ref["lse_err"], empty_rows_ok=emu["empty_rows_ok"], finite=emu["finite"])
    if made is not None:
        for key, anchor_design in (("anchor_ref_rel_l2", make_design("anchor_fp8")),  # exact accumulation
                                   ("anchor_h200_ref_rel_l2", anchor_on_h200_design())):
            anchor, _ = emulate_attention(q, k, v, **kw, design=anchor_design, out_dtype=torch.float32)
            res[key] = ((anchor.double() - ref_out).norm() / ref_out.norm()).item()
        if made.needles:
            res["needle"] = needle_weights(made, out)[0]
            res["needle_ref"] = needle_weights(made, ref_out.float())[0]
    return res


def compare(q, k, v, kw, out, lse, tol: float, lse_tol: float = TOL_LSE, ref_out=None, ref_lse=None) -> dict:
    import torch

    from fa512.numerics.reference import attention_ref

    if ref_out is None:
        ref_out, ref_lse = attention_ref(q, k, v, **kw)
    rel = ((out.double() - ref_out).norm() / ref_out.norm().clamp_min(1e-300)).item()
    fin = torch.isfinite(ref_lse)
    same_inf = bool(torch.equal(fin, torch.isfinite(lse.double())))
    lse_err = (lse.double()[fin] - ref_lse[fin]).abs().max().item() if fin.any() else 0.0
    empty = ~fin.t()  # (total_q, Hq): rows with no visible key must be exactly 0
    empty_zero = bool((out[empty] == 0).all()) if empty.any() else True
    finite = bool(torch.isfinite(out).all())
    ok = rel <= tol and lse_err <= lse_tol and same_inf and finite and empty_zero
    return dict(ok=ok, rel_l2=rel, lse_err=lse_err, empty_rows_ok=same_inf and empty_zero, finite=finite)


def time_cuda(fn) -> float:
    """Median seconds per call, by the project's one timing protocol (`fa512.tools.bench.time_calls`
    with ``rep_budget(quick=True)``): 0.1 s of back-to-back calls to warm up, then the median over
    0.2 s of calls, each between its own pair of CUDA events. The H200 clocks down within tens of
    milliseconds of sustained load, so every kernel and ceiling gets the same stretch of it."""
    from fa512.tools.bench import rep_budget, time_calls

    return time_calls([fn], **rep_budget(True))["ms"] * 1e-3


_TIMER = None


def ceiling(kind: str) -> dict:
    """One ceiling timed now like the kernels: "gemm" (bf16) or "gemm_fp8" 8192^3, or "copy" (1 GB
    each way), through `fa512.tools.bench.CeilingTimer` (its operands kept per worker process)."""
    global _TIMER
    import torch

    from fa512.tools.bench import CeilingTimer

    if _TIMER is None:
        _TIMER = CeilingTimer(torch.device("cuda"), quick=True, copy_bytes=1 << 30)
    if kind == "copy":
        r = _TIMER.copy()
        return dict(ok=True, gbps=r["gbs"], seconds=r["ms"] * 1e-3)
    r = _TIMER.bf16_gemm() if kind == "gemm" else _TIMER.fp8_gemm()
    if "error" in r:
        return dict(ok=False, error=r["error"])
    return dict(ok=True, tflops=r["tflops"], seconds=r["ms"] * 1e-3)


CEILING_KINDS = ("gemm", "gemm_fp8", "copy")


def ceiling_kind(name: str) -> str:
    """The ceiling a timing case is reported against (`summarize`): prefill shapes against a
    GEMM (fp8 for fp8_mma, bf16 otherwise), everything else against the copy bandwidth."""
    if "prefill" in name:
        return "gemm_fp8" if "fp8_mma" in name else "gemm"
    return "copy"


def attention_flops(q_lens, k_lens, hq, causal) -> float:
    """Useful FLOPs (QK^T and PV, 2 per MAC) over the visible (query, key) pairs."""
    total = 0.0
    for sq, sk in zip(q_lens, k_lens):
        if causal:  # bottom-right: query i sees keys <= sk - sq + i
            visible = sum(max(0, min(sk, sk - sq + i + 1)) for i in range(sq))
        else:
            visible = sq * sk
        total += 4 * 512 * hq * visible
    return total


OPTS = SimpleNamespace(kernel_timeout=60.0, trace=False)  # set by main() in the worker


def step(name: str) -> None:
    print(f"@@STEP {name}", flush=True)


def precompile(plan) -> None:
    """Load or compile the kernels a launch of ``plan`` will use, so the kernel watchdog times
    the GPU only."""
    from fa512.backends import compile_cache
    from fa512.backends.cute import kernel_specs

    for spec in kernel_specs(plan.config, plan.num_splits, fused=plan.combine == "fused"):
        if spec is not None:
            compile_cache.get_kernel(spec)


def trace_buffer():
    """(host int32 tensor, device address) of a pinned, host-mapped heartbeat buffer."""
    import torch

    from cute_kernels.diagnostics import TRACE_BUFFER_WORDS

    buf = torch.zeros(TRACE_BUFFER_WORDS, dtype=torch.int32, pin_memory=True)
    addr = buf.data_ptr()  # UVA: pinned host memory has the same address on the device
    try:
        from cuda.bindings import runtime as cudart

        err, dev = cudart.cudaHostGetDevicePointer(addr, 0)
        if int(err) == 0:
            addr = int(dev)
    except Exception:  # noqa: BLE001 - keep the UVA address
        pass
    return buf, addr


def wait_kernel(what: str, trace=None) -> None:
    """Wait for the work queued on the current stream, at most OPTS.kernel_timeout seconds.

    On timeout print ``@@KERNEL_HANG`` and the decoded trace heartbeat, then leave the process
    (a hung kernel cannot be cancelled; exiting tears the context down).
    """
    import torch

    step(f"wait {what}")
    ev = torch.cuda.Event()
    ev.record()
    t0 = time.perf_counter()
    while not ev.query():
        if time.perf_counter() - t0 > OPTS.kernel_timeout:
            lines = [f"@@KERNEL_HANG {what}: not finished after {OPTS.kernel_timeout:.0f} s"]
            if trace is not None:
                from cute_kernels.diagnostics import decode_trace

                lines += ["    trace: " + x for x in decode_trace(trace.tolist())]
            print("\n".join(lines), flush=True)
            os._exit(3)
        time.sleep(0.02)
    torch.cuda.synchronize()  # raises here if the kernel faulted
    if trace is not None:
        from cute_kernels.diagnostics import decode_trace

        print("\n".join("trace: " + x for x in decode_trace(trace.tolist())), flush=True)


def run_case(case: dict) -> dict:
    import torch

    from fa512.backends.cute import forward_config

    kind = case["kind"]
    if kind in ("check", "diag"):
        step("build")
        q, k, v, kw = build(case)
        made = kw.pop("case", None)
        splits = case.get("splits", 1)
        changes = dict(case.get("config") or {})
        trace, trace_addr = None, 0
        if kind == "diag":
            changes["stage"] = case["stage"]
            if OPTS.trace:
                changes["trace"] = True
                trace, trace_addr = trace_buffer()
        kernel = case.get("kernel", "mma16")
        backend, plan, args, out = prepare(q, k, v, kw, splits, changes or None, kernel)
        splits = plan.num_splits
        step(f"compile {forward_config(plan.config, splits, plan.combine).key()}")
        precompile(plan)
        step("launch")
        lse = backend.launch(plan, args, out, trace_addr=trace_addr)
        wait_kernel(case["name"], trace)
        res = dict(ok=True, variant=forward_config(plan.config, splits, plan.combine).key())
        if kind == "check" or case["stage"] == "full":
            step("check")
            if kernel == "fp8_mma":
                res.update(compare_fp8_mma(q, k, v, kw, out, lse, splits, plan.config.with_split(splits > 1), made))
            else:
                res.update(compare(q, k, v, kw, out, lse, tolerance(case)))
        return res
    if kind == "graph":
        kernel = case.get("kernel", "mma16")
        case = dict(q_lens=[1] * 4, k_lens=[3000] * 4, page_size=64, kv=case.get("kv"))
        q, k, v, kw = build(case)
        backend, plan, args, out = prepare(q, k, v, kw, 8, None, kernel)
        step("compile")
        precompile(plan)
        step("launch")
        backend.launch(plan, args, out)
        wait_kernel("graph warm-up")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            lse = backend.launch(plan, args, out)
        ok, rels, lerrs = True, [], []
        for lens in ([3000, 2999, 1, 0], [64, 2048, 777, 3000]):
            kw["seqused_k"].copy_(torch.tensor(lens, dtype=torch.int32))
            graph.replay()
            wait_kernel("graph replay")
            if kernel == "fp8_mma":
                r = compare_fp8_mma(q, k, v, kw, out, lse, 8, plan.config.with_split(True))
            else:
                r = compare(q, k, v, kw, out, lse, tolerance(case))
            ok, rels, lerrs = ok and r["ok"], rels + [r["rel_l2"]], lerrs + [r["lse_err"]]
        return dict(ok=ok, rel_l2=max(rels), lse_err=max(lerrs))
    if kind in CEILING_KINDS:
        return ceiling(kind)
    if kind == "perf":
        q, k, v, kw = build(case)
        kw.pop("case", None)
        splits = case.get("splits", 1)
        backend, plan, args, out = prepare(q, k, v, kw, splits, case.get("config"), case.get("kernel", "mma16"))
        splits = plan.num_splits
        step("compile")
        precompile(plan)
        backend.launch(plan, args, out)
        wait_kernel(case["name"])
        # The ceiling this case is reported against, timed the same way right before and right
        # after it: the H200's clocks sink under sustained load (an fp8 GEMM from ~1470 TFLOP/s
        # over its first ten calls to ~1100-1260 after a few hundred, 2026-11-30), so a ceiling
        # timed at another moment or for another stretch would not be the same machine.
        kind_ceiling = ceiling_kind(case["name"])
        before = ceiling(kind_ceiling)
        t = time_cuda(lambda: backend.launch(plan, args, out))
        after = ceiling(kind_ceiling)
        key = "tflops" if kind_ceiling.startswith("gemm") else "gbps"
        flops = attention_flops(case["q_lens"], case["k_lens"], q.shape[1], case.get("causal", False))
        kv_bytes = sum(case["k_lens"]) * k.shape[-2] * 512 * k.element_size() * 2  # fp8: 1-byte elements
        return dict(ok=True, seconds=t, tflops=flops / t / 1e12, kv_gbps=kv_bytes / t / 1e9, splits=splits,
                    variant=forward_config(plan.config, splits, plan.combine).key(),
                    adjacent={"kind": kind_ceiling, "value": (before[key] + after[key]) / 2,
                              "before": before[key], "after": after[key]})
    if kind == "overhead":
        q, k, v, kw = build(dict(q_lens=[1], k_lens=[64], hq=8, hkv=1))
        backend, plan, args, out = prepare(q, k, v, kw, 1)
        precompile(plan)
        backend.launch(plan, args, out)
        wait_kernel("overhead warm-up")
        n = 500
        t0 = time.perf_counter()
        for _ in range(n):
            backend.launch(plan, args, out)
        host = (time.perf_counter() - t0) / n
        torch.cuda.synchronize()
        return dict(ok=True, host_us_per_call=host * 1e6, note="adapter launch only (validate/plan excluded)")
    raise ValueError(kind)


def worker(cases: list[dict], start: int, stop: int, timeout: float) -> None:
    import faulthandler

    print(f"@@WORKER pid {os.getpid()} importing torch", flush=True)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    for i in range(start, min(stop, len(cases))):
        print(f"@@START {i} {cases[i]['name']}", flush=True)
        # Python stacks of every thread shortly before the parent would kill a silent worker
        faulthandler.dump_traceback_later(max(5.0, 0.85 * timeout), exit=False)
        t0 = time.perf_counter()
        try:
            res = run_case(cases[i])
        except Exception as exc:  # a failure is a result, not a crash of the run
            res = dict(ok=False, error=f"{type(exc).__name__}: {exc}"[:2000])
        faulthandler.cancel_dump_traceback_later()
        res["wall_s"] = round(time.perf_counter() - t0, 2)
        print(f"@@DONE {i} {json.dumps(res)}", flush=True)


# ---------------------------------------------------------------------------------------
# parent side
# ---------------------------------------------------------------------------------------
def supervise(cases: list[dict], timeout: float, argv: list[str], log_dir: Path, one_per_worker: bool = False) -> list[dict]:
    """Run the cases in worker processes; a worker silent for ``timeout`` s is killed (HANG).

    ``one_per_worker``: a fresh process per case (--diag), so one hang cannot leave state behind.
    """
    import queue
    import threading

    log_dir.mkdir(parents=True, exist_ok=True)
    results: list = [None] * len(cases)
    start = 0
    while start < len(cases):
        stop = start + 1 if one_per_worker else len(cases)
        cmd = [sys.executable, __file__, "--worker", "--start", str(start), "--stop", str(stop), *argv]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                start_new_session=True)
        lines: queue.Queue = queue.Queue()

        def pump(stream=proc.stdout, sink=lines):  # a thread: select() misses lines already buffered
            for text in stream:
                sink.put(text)
            sink.put(None)

        threading.Thread(target=pump, daemon=True).start()
        current = start
        last_step = "worker start (import torch)"
        log_case = start
        log = open(log_dir / f"{cases[start]['name']}.log", "w")
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                os.killpg(proc.pid, signal.SIGKILL)
                results[current] = dict(ok=False, error=f"HANG: no progress for {timeout:.0f} s during "
                                                        f"'{last_step}' (killed)")
                print(f"    HANG after {timeout:.0f} s in step '{last_step}': killed the worker", flush=True)
                log.write(f"## HANG after {timeout:.0f} s in step '{last_step}'\n")
                break
            if line is None:
                break
            if line.startswith("@@START"):
                current = int(line.split()[1])
                last_step = "start"
                if current != log_case:
                    log.close()
                    log_case = current
                    log = open(log_dir / f"{cases[current]['name']}.log", "w")
                print(f"[{current + 1}/{len(cases)}] {cases[current]['name']} ...", flush=True)
            log.write(line)
            log.flush()
            if line.startswith("@@START"):
                pass
            elif line.startswith("@@STEP"):
                last_step = line.split(" ", 1)[1].strip()
                print(f"    . {last_step}", flush=True)
            elif line.startswith("@@KERNEL_HANG"):
                results[current] = dict(ok=False, error="KERNEL " + line[2:].strip())
                print(f"    {line.strip()}", flush=True)
            elif line.startswith("@@DONE"):
                _, idx, payload = line.split(" ", 2)
                results[int(idx)] = json.loads(payload)
                print(f"    {format_result(cases[int(idx)], results[int(idx)])}", flush=True)
            else:
                sys.stdout.write("    | " + line)
        log.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # stuck tearing down a hung context
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if results[current] is None:  # the worker died inside a case (crash, illegal address)
            results[current] = dict(ok=False, error=f"worker exited with status {proc.returncode} during "
                                                    f"'{last_step}'")
        start = current + 1
    return results


def format_result(case: dict, r: dict) -> str:
    status = "PASS" if r.get("ok") else "FAIL"
    keys = ("rel_l2", "lse_err", "ref_rel_l2", "ref_lse_err", "anchor_ref_rel_l2", "anchor_h200_ref_rel_l2", "needle",
            "needle_ref", "tflops", "gbps", "kv_gbps", "seconds", "splits", "host_us_per_call", "wall_s")
    parts = [f"{k}={r[k]:.3g}" for k in keys if isinstance(r.get(k), (int, float))]
    if "error" in r:
        parts.append(r["error"])
    if "variant" in r:
        parts.append(r["variant"])
    return f"{status} {case['name']}: " + " ".join(parts)


def summarize(cases, results) -> dict:
    """One line per timing case: its rate as a fraction of the ceiling timed around it (the mean
    of the ceiling's timings right before and right after the case)."""
    by = {c["name"]: r for c, r in zip(cases, results)}
    what = {"gemm": "bf16 GEMM", "gemm_fp8": "fp8 GEMM", "copy": "copy"}
    s = {}
    for name, r in by.items():
        if name.startswith(("perf_", "ab_")) and r.get("ok") and "adjacent" in r:
            adj = r["adjacent"]
            if adj["kind"] == "copy":
                rate, unit = r["kv_gbps"], "GB/s K/V"
            else:
                rate, unit = r["tflops"], "TFLOP/s"
            s[name] = (f"{rate:.0f} {unit} = {100 * rate / adj['value']:.1f}% of {what[adj['kind']]} "
                       f"({adj['before']:.0f} before, {adj['after']:.0f} after)")
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small correctness cases only (no Gemma-size cases)")
    ap.add_argument("--no-perf", action="store_true", help="skip the timings")
    ap.add_argument("--perf-only", action="store_true", help="only the timings (ceilings included)")
    ap.add_argument("--ab", action="store_true", help="also time the A/B layouts (duplicated QK, tile_n=32)")
    ap.add_argument("--fp8", action="store_true",
                    help="the fp8_mma suite: correctness vs its emulation (<= 5e-4) and the reference, fp8 timings")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds of silence before a case counts as hung")
    ap.add_argument("--kernel-timeout", type=float, default=60.0,
                    help="seconds a launched kernel may run before the worker reports KERNEL_HANG and exits")
    ap.add_argument("--diag", action="store_true",
                    help="stage bisection of a hang: one tiny launch per kernel cut, one worker each (see above)")
    ap.add_argument("--trace", action="store_true",
                    help="with --diag: compile the cuts with cfg.trace (per-warp heartbeat in host memory + printf)")
    ap.add_argument("--inline", action="store_true",
                    help="run the cases in this process, no worker (for compute-sanitizer); with --case")
    ap.add_argument("--case", default=None, help="only the cases whose name contains one of these comma-separated texts")
    ap.add_argument("--out", default="out/gpu_mma16_smoke", help="directory for results.json and worker_logs/")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--stop", type=int, default=1 << 30, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.diag:
        cases = diag_cases()
    elif args.fp8:
        cases = ([] if args.perf_only else fp8_mma_cases(args.quick)) + ([] if args.no_perf else fp8_perf_cases())
    else:
        cases = ([] if args.perf_only else correctness_cases(args.quick)) + ([] if args.no_perf else perf_cases(args.ab))
    if args.case:
        wanted = args.case.split(",")
        cases = [c for c in cases if any(w in c["name"] for w in wanted)]
    OPTS.kernel_timeout, OPTS.trace = args.kernel_timeout, args.trace
    if args.worker:
        worker(cases, args.start, args.stop, args.timeout)
        return 0
    if args.inline:
        worker(cases, 0, len(cases), 1e9)
        return 0

    import torch

    print(f"torch {torch.__version__}, cuda {torch.version.cuda}, python {sys.version.split()[0]}")
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to run")
        return 2
    print(f"device {torch.cuda.get_device_name()} cc {torch.cuda.get_device_capability()}")
    print(f"FA512_CACHE_DIR={os.environ.get('FA512_CACHE_DIR', '~/.cache/fa512')}", flush=True)
    passthrough = [a for a in sys.argv[1:] if a not in ("--worker",)]
    out = Path(args.out)
    results = supervise(cases, args.timeout, passthrough, out / "worker_logs", one_per_worker=args.diag)
    if args.diag:
        first_bad = next((c["name"] for c, r in zip(cases, results) if not r.get("ok")), None)
        print(f"diag: first failing cut: {first_bad}" if first_bad else "diag: every cut completed and passed")
    summary = summarize(cases, results)
    for line in summary.items():
        print("  %s: %s" % line)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(
        dict(cases=[dict(case=c, result=r) for c, r in zip(cases, results)], summary=summary), indent=1))
    failed = [c["name"] for c, r in zip(cases, results) if not r.get("ok")]
    print(f"{len(cases) - len(failed)}/{len(cases)} passed" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
