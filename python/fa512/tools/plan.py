"""``python -m fa512 plan``: the dispatch decision for a shape, from meta tensors (no GPU needed)."""

from __future__ import annotations

import argparse

import torch

from ..contract import PRECISIONS

DTYPES = {"fp8": torch.float8_e4m3fn, "bf16": torch.bfloat16, "fp16": torch.float16}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seqlen-q", type=int, default=1, help="query tokens per sequence")
    p.add_argument("--seqlen-k", type=int, default=8192, help="keys per sequence (max_seqlen_k)")
    p.add_argument("--hq", type=int, default=32)
    p.add_argument("--hkv", type=int, default=4)
    p.add_argument("--q-dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--kv-dtype", choices=list(DTYPES), default="fp8")
    p.add_argument("--page-size", type=int, default=64, help="0 for packed K/V")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--window-left", type=int, default=-1)
    p.add_argument("--window-right", type=int, default=-1)
    p.add_argument("--num-splits", type=int, default=0)
    p.add_argument("--kernel", default="auto")
    p.add_argument("--precision", choices=list(PRECISIONS), default="auto",
                   help="fp8_mma's numerics (fa512.planning.precision)")
    p.add_argument("--target", default=None, help="cpu | sm_90[:SMs] | sm_120[:SMs]; default: this machine")


def main(args: argparse.Namespace) -> int:
    """Build meta tensors of the requested shape and print `fa512.plan`'s decision."""
    from ..api.attention import plan
    from ..planning.dispatch import target_of

    b, sq, sk = args.batch, args.seqlen_q, args.seqlen_k
    meta = dict(device="meta")
    q = torch.empty(b * sq, args.hq, 512, dtype=DTYPES[args.q_dtype], **meta)
    kv = DTYPES[args.kv_dtype]
    kw = dict(
        cu_seqlens_q=torch.empty(b + 1, dtype=torch.int32, **meta),
        seqused_k=torch.empty(b, dtype=torch.int32, **meta),
        max_seqlen_q=sq, max_seqlen_k=sk, causal=args.causal, window_left=args.window_left,
        window_right=args.window_right, num_splits=args.num_splits, kernel=args.kernel,
        precision=args.precision,
    )
    if args.page_size > 0:
        pages = -(-sk // args.page_size)
        k = torch.empty(b * pages, args.page_size, args.hkv, 512, dtype=kv, **meta)
        kw["page_table"] = torch.empty(b, pages, dtype=torch.int32, **meta)
    else:
        k = torch.empty(b * sk, args.hkv, 512, dtype=kv, **meta)
        kw["cu_seqlens_k"] = torch.empty(b + 1, dtype=torch.int32, **meta)
    target = args.target or ("cuda" if torch.cuda.is_available() else "cpu")
    if target == "cuda":
        target = target_of(torch.device("cuda"))
    print(plan(q, k, k, **kw, target=target).describe())
    return 0
