"""`python -m fa512 check`: every kernel this machine can run, against the float64 reference.

Runs Gemma-4 head shapes (31B: Hq=32/Hkv=4, 26B-A4B: 16/2, E2B: 8/1) through prefill (causal),
decode and chunked prefill (local window) with fp8 and 16-bit KV, and prints one row per
(kernel, case): rel L2 error of out, max lse error, time. Kernels that cannot run here are
listed with the reason. On a CPU-only machine the cases are small so the check ends in
about a minute.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import torch

from ..api.attention import attention, plan
from ..errors import KernelUnavailableError
from ..numerics.reference import attention_ref

GEMMA4_HEADS = {"31B": (32, 4), "26B-A4B": (16, 2), "E2B": (8, 1)}
KERNELS = ("fp8_mma", "mma16", "triton", "reference")


@dataclass(frozen=True)
class Case:
    name: str
    q_lens: tuple
    k_lens: tuple
    causal: bool = False
    window_left: int = -1


def cases(on_gpu: bool) -> list[Case]:
    if on_gpu:
        return [
            Case("prefill causal 2k", (2048,), (2048,), causal=True),
            Case("decode B=8 k=8k", (1,) * 8, (8192, 8000, 5000, 7777, 8192, 1, 4096, 300)),
            Case("chunked prefill local", (512, 256), (4096, 1024), causal=True, window_left=1023),
        ]
    return [
        Case("prefill causal 128", (128,), (128,), causal=True),
        Case("decode B=4 k=600", (1, 1, 1, 1), (600, 1, 333, 512)),
        Case("chunked prefill local", (32, 16), (300, 64), causal=True, window_left=127),
    ]


def make_inputs(case: Case, hq: int, hkv: int, kv_dtype: torch.dtype, q_dtype: torch.dtype, device, seed: int = 0):
    """Random Gemma-like inputs in a paged cache of 64-row pages (fresh values per seed)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    page = 64
    b = len(case.q_lens)
    q = torch.randn(sum(case.q_lens), hq, 512, generator=g)
    q = q / q.pow(2).mean(-1, keepdim=True).sqrt()  # RMS-normalised, as Gemma-4's q-norm leaves it
    pages = [-(-n // page) for n in case.k_lens]
    k = torch.randn(sum(pages) + 1, page, hkv, 512, generator=g)
    k = k / k.pow(2).mean(-1, keepdim=True).sqrt()
    v = torch.randn(sum(pages) + 1, page, hkv, 512, generator=g)
    table = torch.zeros(b, max(pages), dtype=torch.int32)
    perm = torch.randperm(sum(pages) + 1, generator=g)[: sum(pages)].int()
    start = 0
    for i, n in enumerate(pages):
        table[i, :n] = perm[start : start + n]
        start += n
    cu_q = torch.tensor([0, *torch.tensor(case.q_lens).cumsum(0).tolist()], dtype=torch.int32)
    kw = dict(
        cu_seqlens_q=cu_q.to(device), seqused_k=torch.tensor(case.k_lens, dtype=torch.int32, device=device),
        page_table=table.to(device), max_seqlen_q=max(case.q_lens), max_seqlen_k=max(case.k_lens),
        causal=case.causal, window_left=case.window_left,
        softmax_scale=1.0 / 16.0,  # logit std ~1.4 with RMS-normalised q/k at d=512
    )
    if kv_dtype == torch.float8_e4m3fn:
        kd = torch.full((b, hkv), 0.5)
        kw.update(k_descale=kd.to(device), v_descale=(kd * 1.5).to(device))
        k, v = (k / 0.5).to(kv_dtype), (v / 0.75).to(kv_dtype)
    return q.to(q_dtype).to(device), k.to(kv_dtype).to(device), v.to(kv_dtype).to(device), kw


def _rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _lse_err(a: torch.Tensor, b: torch.Tensor) -> float:
    finite = torch.isfinite(b)
    if not bool((torch.isfinite(a) == finite).all()):
        return float("inf")
    return float((a.double()[finite] - b.double()[finite]).abs().max()) if bool(finite.any()) else 0.0


def run_check(device: str, quick: bool = False) -> tuple[list[dict], dict]:
    """Returns (rows, skipped) where skipped maps kernel -> reason it could not run here."""
    dev = torch.device(device)
    on_gpu = dev.type == "cuda"
    rows, skipped = [], {}
    heads = dict(list(GEMMA4_HEADS.items())[:1]) if quick else GEMMA4_HEADS
    for model, (hq, hkv) in heads.items():
        for case in cases(on_gpu):
            for kv_name, kv_dtype in (("fp8", torch.float8_e4m3fn), ("bf16", None)):
                q_dtype = torch.bfloat16 if on_gpu else torch.float16
                kv = kv_dtype or q_dtype
                q, k, v, kw = make_inputs(case, hq, hkv, kv, q_dtype, dev)
                # float64 on the same device: a GPU's fp64 units keep the 2k prefill cheap.
                ref_out, ref_lse = attention_ref(q, k, v, **kw)
                for name in KERNELS:
                    try:
                        plan(q, k, v, **kw, kernel=name)
                    except KernelUnavailableError as e:
                        skipped.setdefault(name, str(e).split(": ", 2)[-1])
                        continue
                    attention(q, k, v, **kw, kernel=name)  # warm-up (compiles)
                    if on_gpu:
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    out, lse = attention(q, k, v, **kw, kernel=name)
                    if on_gpu:
                        torch.cuda.synchronize()
                    ms = (time.perf_counter() - t0) * 1e3
                    rows.append(dict(
                        kernel=name, model=model, case=case.name, kv=kv_name if kv_dtype else _short(q_dtype),
                        rel_l2=_rel_l2(out, ref_out), lse_err=_lse_err(lse, ref_lse), ms=ms,
                    ))
    return rows, skipped


def _short(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))


def format_table(rows: list[dict], skipped: dict, device: str) -> str:
    lines = [f"fa512 check on {device}: every runnable kernel vs the float64 reference"]
    header = f"{'kernel':<10} {'model':<8} {'case':<24} {'kv':<5} {'rel L2':>9} {'lse err':>9} {'ms':>9}"
    lines += [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['kernel']:<10} {r['model']:<8} {r['case']:<24} {r['kv']:<5} {r['rel_l2']:>9.2e} "
            f"{r['lse_err']:>9.2e} {r['ms']:>9.2f}"
        )
    for name, why in skipped.items():
        lines.append(f"not run: {name}: {why}")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--quick", action="store_true", help="only the 31B heads")


def main(args: argparse.Namespace) -> int:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows, skipped = run_check(device, quick=args.quick)
    print(format_table(rows, skipped, device))
    return 0
