#!/usr/bin/env python
"""Profile one fa512 workload with NVTX ranges: under nsys, under ncu, or with torch.profiler.

    python profiles/nsys_run.py --case decode --batch 64 --seqlen-k 8192 --kernel fp8_mma
    python profiles/nsys_run.py --case prefill --seqlen-k 8192 --ncu --ncu-call 3
    python profiles/nsys_run.py --case mixed --dry-run      # show what would run, run nothing

Workloads (``--case``): ``prefill`` (B sequences of L tokens, causal), ``decode`` (B sequences,
one query each, seqused_k keys), ``mixed`` (one chunked-prefill sequence of ``--q-len`` new
tokens plus B-1 decodes in one varlen call, as a serving step). Phases ``setup``, ``warmup``
and ``steady`` and every op call (``fa512.attention[<kernel>] #i``) are NVTX ranges (the nvtx
package; without it the ranges are skipped) and torch.profiler record_function ranges.

Profiler choice (`decide_profiler`): ``--ncu`` runs Nsight Compute with ``--clock-control none``
on one launch (the first kernel of steady call ``--ncu-call``, or ``--ncu-launch-skip`` launches
later) selected through the NVTX range ``fa512_ncu_target``; otherwise nsys when it is on PATH
(re-running this script under ``nsys profile``, writing a .nsys-rep and a short summary of
kernel and NVTX times); otherwise torch.profiler in-process (a chrome trace plus a kernel time
table). ``--profiler torch`` forces the fallback. Outputs go to ``--out`` (default
out/profiles).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional

try:  # NVTX ranges are optional: the workload runs the same without them.
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - depends on the environment
    _nvtx = None

NCU_TARGET_RANGE = "fa512_ncu_target"
CASES = ("prefill", "decode", "mixed")
DEFAULTS = {  # case -> (batch, seqlen_k, q_len)
    "prefill": (1, 8192, None),
    "decode": (64, 8192, 1),
    "mixed": (16, 8192, 512),
}


@dataclass
class Decision:
    """How to profile: mode "nsys" | "ncu" | "torch" | "inner" | "error", why, and the command."""

    mode: str
    reason: str
    command: Optional[list] = None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python profiles/nsys_run.py", description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--case", choices=CASES, default="decode", help="workload (default decode)")
    p.add_argument("--heads", default="31B", help="Gemma-4 heads: 31B, 26B-A4B, E2B or Hq/Hkv (default 31B)")
    p.add_argument("--batch", type=int, default=None, help="sequences per call (default: prefill 1, decode 64, mixed 16)")
    p.add_argument("--seqlen-k", type=int, default=None, help="keys per sequence (default 8192)")
    p.add_argument("--q-len", type=int, default=None, help="prefill: tokens (default seqlen-k); mixed: chunk (default 512)")
    p.add_argument("--kernel", default="auto", help="auto | fp8_mma | mma16 | triton | reference (default auto)")
    p.add_argument("--kv", choices=("fp8", "bf16"), default="fp8", help="KV cache dtype (default fp8)")
    p.add_argument("--mask", choices=("causal", "local", "full"), default="causal")
    p.add_argument("--window", type=int, default=1023, help="window_left for --mask local (default 1023)")
    p.add_argument("--iters", type=int, default=20, help="steady-state op calls (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up op calls, compile included (default 5)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="default: cuda when available")
    p.add_argument("--out", default=os.path.join("out", "profiles"), help="output directory (default out/profiles)")
    p.add_argument("--profiler", choices=("auto", "nsys", "torch"), default="auto",
                   help="auto: nsys when on PATH, else torch.profiler (default auto)")
    p.add_argument("--ncu", action="store_true", help="run Nsight Compute on one launch instead")
    p.add_argument("--ncu-call", type=int, default=0, help="steady-state call whose kernels ncu profiles (default 0)")
    p.add_argument("--ncu-launch-skip", type=int, default=0, help="kernel launches to skip inside that call (default 0)")
    p.add_argument("--ncu-set", default="full", help="ncu section set (default full)")
    p.add_argument("--ncu-kernel", default=None, help="regex on the kernel name, passed as --kernel-name regex:...")
    p.add_argument("--dry-run", action="store_true", help="print the decision and command, run nothing")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)  # set when re-run under nsys/ncu
    return p


def resolve_shape(args) -> dict:
    """Per-sequence q/k lengths and mask arguments for the chosen case."""
    batch, seqlen_k, q_len = DEFAULTS[args.case]
    batch = batch if args.batch is None else args.batch
    seqlen_k = seqlen_k if args.seqlen_k is None else args.seqlen_k
    q_len = (seqlen_k if args.case == "prefill" else q_len) if args.q_len is None else args.q_len
    if batch < 1 or seqlen_k < 1 or q_len < 1:
        raise ValueError(
            f"nsys_run: got --batch {batch}, --seqlen-k {seqlen_k}, --q-len {q_len}, expected each >= 1"
        )
    if args.case == "prefill":
        q_lens, k_lens = [q_len] * batch, [seqlen_k] * batch
    elif args.case == "decode":
        q_lens, k_lens = [1] * batch, [seqlen_k] * batch
    else:
        q_lens, k_lens = [min(q_len, seqlen_k)] + [1] * (batch - 1), [seqlen_k] * batch
    return {
        "q_lens": q_lens,
        "k_lens": k_lens,
        "causal": args.mask != "full",
        "window_left": args.window if args.mask == "local" else -1,
    }


def _runs(xs: list) -> str:
    """Run-length text of a length list: [512, 1, 1, 1] -> '512, 1 x3'."""
    parts, i = [], 0
    while i < len(xs):
        j = i
        while j < len(xs) and xs[j] == xs[i]:
            j += 1
        parts.append(f"{xs[i]}" + (f" x{j - i}" if j - i > 1 else ""))
        i = j
    return ", ".join(parts)


def run_name(args) -> str:
    shape = resolve_shape(args)
    return f"fa512_{args.case}_{args.kernel}_{args.kv}_B{len(shape['k_lens'])}_k{max(shape['k_lens'])}"


def _inner_argv(argv: list) -> list:
    """This script's command line for the profiled child: same options plus --inner."""
    return [sys.executable, os.path.abspath(__file__), *[a for a in argv if a != "--dry-run"], "--inner"]


def nsys_command(exe: str, args, argv: list) -> list:
    out = os.path.join(args.out, run_name(args))
    return [
        exe, "profile", "--trace=cuda,nvtx,osrt", "--sample=none", "--force-overwrite=true",
        f"--output={out}", *_inner_argv(argv),
    ]


def ncu_command(exe: str, args, argv: list) -> list:
    out = os.path.join(args.out, run_name(args) + "_ncu")
    cmd = [
        exe, "--clock-control", "none", "--target-processes", "all", "--set", args.ncu_set,
        "--nvtx", "--nvtx-include", f"{NCU_TARGET_RANGE}/",
        "--launch-skip", str(args.ncu_launch_skip), "--launch-count", "1",
        "--force-overwrite", "--export", out,
    ]
    if args.ncu_kernel:
        cmd += ["--kernel-name", f"regex:{args.ncu_kernel}"]
    return cmd + _inner_argv(argv)


def decide_profiler(args, argv: Optional[list] = None, which: Callable = shutil.which) -> Decision:
    """Pick the profiler from the options and what is on PATH (``which`` is injectable for tests)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if args.inner:
        return Decision("inner", "running inside an external profiler (--inner)")
    if args.ncu:
        exe = which("ncu")
        if exe is None:
            return Decision("error", "--ncu needs Nsight Compute's `ncu` on PATH and it is not there")
        return Decision("ncu", f"ncu found at {exe}; profiling one launch with --clock-control none", ncu_command(exe, args, argv))
    if args.profiler == "torch":
        return Decision("torch", "--profiler torch: torch.profiler in-process (chrome trace + kernel time table)")
    exe = which("nsys")
    if exe is None:
        if args.profiler == "nsys":
            return Decision("error", "--profiler nsys: `nsys` is not on PATH")
        return Decision("torch", "nsys not found on PATH: falling back to torch.profiler (chrome trace + kernel time table)")
    return Decision("nsys", f"nsys found at {exe}", nsys_command(exe, args, argv))


# -- the workload ----------------------------------------------------------------------------


@contextlib.contextmanager
def phase(name: str):
    """An NVTX range (when the nvtx package is present) and a torch.profiler range."""
    import torch

    nv = _nvtx.annotate(name) if _nvtx is not None else contextlib.nullcontext()
    with nv, torch.profiler.record_function(name):
        yield


def run_workload(args, device) -> dict:
    """Build inputs, warm up, run the steady-state calls; returns timing facts."""
    import torch

    import fa512
    from fa512.tools.inputs import make_bench_case

    shape = resolve_shape(args)
    kv_dtype = torch.float8_e4m3fn if args.kv == "fp8" else torch.bfloat16
    with phase("setup"):
        case = make_bench_case(
            heads=args.heads, q_lens=shape["q_lens"], k_lens=shape["k_lens"], causal=shape["causal"],
            window_left=shape["window_left"], kv_dtype=kv_dtype, seed=args.seed, device=device,
        )
        out = torch.empty_like(case.q)
        plan = fa512.plan(case.q, case.k, case.v, **case.kwargs(), kernel=args.kernel)
    label = f"fa512.attention[{plan.kernel}]"

    def call():
        fa512.attention(case.q, case.k, case.v, **case.kwargs(), out=out, kernel=args.kernel)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    t0 = time.perf_counter()
    with phase("warmup"):
        for i in range(args.warmup):
            with phase(f"{label} warmup {i}"):
                call()
        sync()
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with phase("steady"):
        for i in range(args.iters):
            target = args.ncu and i == args.ncu_call and device.type == "cuda"
            if target:
                torch.cuda.nvtx.range_push(NCU_TARGET_RANGE)
            with phase(f"{label} #{i}"):
                call()
            if target:
                torch.cuda.nvtx.range_pop()
        sync()
    steady_s = time.perf_counter() - t0
    return {
        "kernel": plan.kernel,
        "num_splits": plan.num_splits,
        "plan": plan.reason,
        "problem": plan.problem.shape_str(),
        "warmup_s": warm_s,
        "steady_ms_per_call": 1e3 * steady_s / max(1, args.iters),
        "nvtx": _nvtx is not None,
    }


def _torch_profile(args, device) -> dict:
    """The fallback: torch.profiler around the whole workload, chrome trace + kernel table."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        facts = run_workload(args, device)
    name = run_name(args)
    trace = os.path.join(args.out, name + "_trace.json")
    prof.export_chrome_trace(trace)
    events = prof.key_averages()
    table = None
    for key in (("self_cuda_time_total", "self_device_time_total") if device.type == "cuda" else ()) + ("self_cpu_time_total",):
        try:
            table = events.table(sort_by=key, row_limit=25)
            break
        except (AttributeError, KeyError, ValueError):
            continue
    table_path = os.path.join(args.out, name + "_kernels.txt")
    with open(table_path, "w") as fh:
        fh.write(table or "")
    print(table)
    return {**facts, "trace": trace, "table": table_path}


def _nsys_summary(exe: str, rep: str, path: str) -> Optional[str]:
    """`nsys stats` kernel and NVTX summaries into ``path`` (report names differ by version)."""
    for reports in (("cuda_gpu_kern_sum", "nvtx_sum"), ("gpukernsum", "nvtxsum")):
        cmd = [exe, "stats", "--force-export=true"] + [x for r in reports for x in ("--report", r)] + [rep]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            with open(path, "w") as fh:
                fh.write(proc.stdout)
            return proc.stdout
    return None


def main(argv: Optional[list] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        resolve_shape(args)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    decision = decide_profiler(args, argv)
    if args.dry_run:
        shape = resolve_shape(args)
        summary = {
            "batch": len(shape["k_lens"]), "q_lens": _runs(shape["q_lens"]), "k_lens": _runs(shape["k_lens"]),
            "causal": shape["causal"], "window_left": shape["window_left"],
        }
        print(json.dumps({"decision": asdict(decision), "shape": summary, "name": run_name(args),
                          "command": shlex.join(decision.command) if decision.command else None}, indent=1))
        return 0 if decision.mode != "error" else 2
    if decision.mode == "error":
        print(f"nsys_run: {decision.reason}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    if decision.mode in ("nsys", "ncu"):
        print(f"nsys_run: {decision.reason}\n  $ {shlex.join(decision.command)}", file=sys.stderr)
        rc = subprocess.run(decision.command).returncode
        if rc != 0:
            print(f"nsys_run: {decision.mode} exited with {rc}", file=sys.stderr)
            return rc
        if decision.mode == "nsys":
            rep = os.path.join(args.out, run_name(args) + ".nsys-rep")
            summary = _nsys_summary(decision.command[0], rep, os.path.join(args.out, run_name(args) + "_summary.txt"))
            print(summary or f"nsys_run: wrote {rep} (nsys stats gave no summary)")
            print(f"nsys_run: report {rep}")
        else:
            print(f"nsys_run: report {os.path.join(args.out, run_name(args) + '_ncu.ncu-rep')} "
                  f"(open with `ncu --import <file> --page details`)")
        return 0

    import torch

    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        print("nsys_run: --device cuda: no CUDA GPU is visible", file=sys.stderr)
        return 2
    device = torch.device("cuda" if args.device != "cpu" and cuda else "cpu")
    if decision.mode == "inner":
        facts = run_workload(args, device)
        print("nsys_run (inner): " + json.dumps(facts))
        return 0
    print(f"nsys_run: {decision.reason}", file=sys.stderr)
    facts = _torch_profile(args, device)
    facts.update(decision=asdict(decision), device=str(device))
    summary = os.path.join(args.out, run_name(args) + "_summary.json")
    with open(summary, "w") as fh:
        json.dump(facts, fh, indent=1)
    print(f"nsys_run: {facts['kernel']} x {args.iters} calls, {facts['steady_ms_per_call']:.3f} ms/call (profiled, host clock)")
    print(f"nsys_run: wrote {facts['trace']} (open in chrome://tracing or ui.perfetto.dev), {facts['table']}, {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
