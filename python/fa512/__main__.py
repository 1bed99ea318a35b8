"""Command line: ``python -m fa512 {plan,check,...}``. Each subcommand lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import sys

import torch

# subcommand -> (module exposing add_arguments(parser) and main(args) -> int, one-line help)
COMMANDS = {
    "plan": ("fa512.__main__", "print the dispatch decision for a shape (no GPU needed)"),
    "check": ("fa512.check", "run every kernel available here against the reference"),
    "ab": ("fa512.tools.ab", "accuracy A/B of kernels and FP8 numeric designs vs float64"),
    "bench": ("fa512.tools.bench", "benchmark against ceilings measured in the same run (GPU)"),
    "fuzz": ("fa512.tools.fuzz", "seeded random calls over the whole contract, every kernel vs float64"),
    "compile": ("fa512.compile_cli", "compile every SM90 CuTe DSL variant (no GPU needed) and check its SASS"),
    "native": ("fa512.native", "build (or load) the native warm call now and say where it is"),
}


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
    p.add_argument("--target", default=None, help="cpu | sm_90[:SMs] | sm_120[:SMs]; default: this machine")


def main(args: argparse.Namespace) -> int:
    """`plan`: build meta tensors of the requested shape and print `fa512.plan`'s decision."""
    from .api import plan

    b, sq, sk = args.batch, args.seqlen_q, args.seqlen_k
    meta = dict(device="meta")
    q = torch.empty(b * sq, args.hq, 512, dtype=DTYPES[args.q_dtype], **meta)
    kv = DTYPES[args.kv_dtype]
    kw = dict(
        cu_seqlens_q=torch.empty(b + 1, dtype=torch.int32, **meta),
        seqused_k=torch.empty(b, dtype=torch.int32, **meta),
        max_seqlen_q=sq, max_seqlen_k=sk, causal=args.causal, window_left=args.window_left,
        window_right=args.window_right, num_splits=args.num_splits, kernel=args.kernel,
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
        from .dispatch import target_of

        target = target_of(torch.device("cuda"))
    print(plan(q, k, k, **kw, target=target).describe())
    return 0


def cli(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fa512", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        mod = importlib.import_module(module)
        mod.add_arguments(sub.add_parser(name, help=help_text, description=mod.__doc__))
    args = parser.parse_args(argv)
    return importlib.import_module(COMMANDS[args.command][0]).main(args)


if __name__ == "__main__":
    sys.exit(cli())
