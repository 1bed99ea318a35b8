"""Host launch overhead of one warm eager call served by the SM90 kernels (mma16, fp8_mma).

Run from the repository root on an SM90 GPU (CuTe DSL installed; FA512_CACHE_DIR set so the
kernels load from the disk cache)::

    PYTHONPATH=python:. python3 profiles/host_overhead.py [--case NAME ...] [--repeats 101] [--calls 32]

Without a GPU (or with ``--stub``) the same Python path runs on CPU tensors of the same shapes,
with the CUDA-only pieces stubbed (`stubbed`): the target reads as an H200, the compiled
kernels are a no-op Python function, the raw-stream getter returns 0 and allocations come from
the CPU allocator. That measures everything fa512 does per call except the tvm-ffi call itself
and the CUDA caching allocator; one CPU-only extra is the TRITON_INTERPRET lookup that CPU call
signatures carry (~0.5-1 us).

Per case and entry point (``attention``: out allocated by fa512; ``attention_out``: the
caller's out; ``op``: ``torch.ops.fa512.fwd`` through the dispatcher), after warm-up: each of
``--repeats`` rounds times ``--calls`` back-to-back calls with time.perf_counter (no sync inside
the round; each round starts on an idle GPU) and reports us per call (median and min over
rounds). Rounds are short (32 calls) so the launch queue never fills: with 200 calls of a
kernel longer than the host work, the host would wait on the GPU and time the kernels. On a GPU
the same rounds are also timed with CUDA events (device time per call; equal to the host time
only when the GPU waits on the host, as in the ``decode_tiny`` cases). ``--profile`` adds a cProfile of the warm
``attention`` loop. The acceptance bar is < 10 us per call for ``attention`` and ``op``.
``--breakdown`` times the pieces of one warm call instead; with ``--floor`` it adds torch's own
cost of calling an op with fa512's schema (``profiles/dispatch_floor.py``: a no-op kernel, from
Python and from the C++ dispatcher) beside ``fa512::fwd`` on both paths.

Dev-VM numbers (stubbed, before and after the per-signature launchers) are in fa512/launch/memo.py.
"""

from __future__ import annotations

import argparse
import gc
import contextlib
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
from typing import Optional

import torch

D = 512
# Gemma-4 31B full-attention heads (Hq=32, Hkv=4). q_len / k_len per sequence.
CASES = {
    "decode_fp8": dict(batch=64, q_len=1, k_len=8192, kv_dtype=torch.float8_e4m3fn, page_size=64),
    "decode_fp8_descale": dict(batch=64, q_len=1, k_len=8192, kv_dtype=torch.float8_e4m3fn, page_size=64,
                               descale=True),
    "decode_fp8_mma": dict(batch=64, q_len=1, k_len=8192, kv_dtype=torch.float8_e4m3fn, page_size=64,
                           descale=True, kernel="fp8_mma"),
    "decode_bf16": dict(batch=64, q_len=1, k_len=8192, kv_dtype=torch.bfloat16, page_size=64),
    "decode_bf16_splits": dict(batch=4, q_len=1, k_len=8192, kv_dtype=torch.bfloat16, page_size=64, num_splits=8),
    "prefill_causal": dict(batch=1, q_len=8192, k_len=8192, kv_dtype=torch.bfloat16, page_size=0, causal=True),
    # A kernel shorter than the host work: CUDA-event time per call is then the launch rate.
    "decode_tiny": dict(batch=1, q_len=1, k_len=64, kv_dtype=torch.bfloat16, page_size=64),
    # the same with forward + combine, and fp8_mma's V^T prepass + forward (16 M tiles at G=8)
    "decode_tiny_splits": dict(batch=1, q_len=1, k_len=512, kv_dtype=torch.bfloat16, page_size=64, num_splits=4),
    # tests/test_native.py's "bf16_split" call: 4 sequences of up to 3000 keys, 5 splits
    "decode_b4_splits5": dict(batch=4, q_len=1, k_len=3000, kv_dtype=torch.bfloat16, page_size=64, num_splits=5),
    "prefill_tiny_prepass": dict(batch=1, q_len=128, k_len=128, kv_dtype=torch.float8_e4m3fn, page_size=64,
                                 descale=True, kernel="fp8_mma", causal=True),
}
APIS = ("attention", "attention_out", "op")


def make_call(case: dict, device: str, hq: int = 32, hkv: int = 4) -> tuple:
    """(q, k, v, kwargs) for `fa512.attention`; K/V uninitialised (only the launch is timed)."""
    b, lq, lk, ps = case["batch"], case["q_len"], case["k_len"], case["page_size"]
    i32 = dict(dtype=torch.int32, device=device)
    q = torch.empty(b * lq, hq, D, dtype=torch.bfloat16, device=device)
    kw = dict(
        cu_seqlens_q=torch.arange(0, b * lq + 1, lq, **i32), seqused_k=torch.full((b,), lk, **i32),
        max_seqlen_q=lq, max_seqlen_k=lk, softmax_scale=1.0, causal=case.get("causal", False),
        num_splits=case.get("num_splits", 0), kernel=case.get("kernel", "mma16"),
    )
    if ps:
        pages = b * (-(-lk // ps))
        k = torch.empty(pages, ps, hkv, D, dtype=case["kv_dtype"], device=device)
        kw["page_table"] = torch.arange(pages, **i32).view(b, -1)
    else:
        k = torch.empty(b * lk, hkv, D, dtype=case["kv_dtype"], device=device)
        kw["cu_seqlens_k"] = torch.arange(0, b * lk + 1, lk, **i32)
    if case.get("descale"):
        kw["k_descale"] = torch.ones(hkv, device=device)
        kw["v_descale"] = torch.ones(hkv, device=device)
    return q, k, torch.empty_like(k), kw


def op_args(q, k, v, out, kw):
    """The 20 arguments of torch.ops.fa512.fwd for the same call, as a `fa512.call.Call`."""
    from fa512.call import Call

    return Call(
        q, k, v, out, kw.get("page_table"), kw.get("cu_seqlens_k"), kw["cu_seqlens_q"], kw["max_seqlen_q"],
        kw["seqused_k"], kw["max_seqlen_k"], kw["softmax_scale"], kw["causal"], -1, -1, kw.get("q_descale"),
        kw.get("k_descale"), kw.get("v_descale"), kw["num_splits"], kw["kernel"],
    )


class StubKernel:
    """Stands in for a compiled tvm-ffi function: records its calls, runs nothing.

    ``last_args`` are the arguments as received; ``last_desc`` describes each while the call
    runs (tensors as (shape, strides, dtype, data_ptr); the tvm-ffi form's tensor arguments are
    views that do not outlive the call)."""

    def __init__(self, name: str, describe: bool = False):
        self.name = name
        self.describe = describe  # off for the timings (it costs more than the launch path)
        self.calls = 0
        self.last_args: Optional[tuple] = None
        self.last_desc: Optional[list] = None

    def __call__(self, *args):
        self.calls += 1
        self.last_args = args
        if self.describe:
            self.last_desc = [describe_arg(a) for a in args]

    def ffi(self):
        """The stub as a tvm-ffi function, callable from C++ like a compiled kernel."""
        import tvm_ffi

        return tvm_ffi.convert(self)


def describe_arg(a):
    """A kernel argument as plain data: tensors (torch or tvm-ffi) by metadata and address; a
    stream handle (ctypes pointer from C++) as the int the Python path passes."""
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        strides = a.stride() if isinstance(a, torch.Tensor) else a.strides
        return ("tensor", tuple(a.shape), tuple(strides), str(a.dtype).replace("torch.", ""), a.data_ptr())
    if type(a).__name__ == "c_void_p":
        return ("int", a.value or 0)
    return (type(a).__name__, a)


@contextlib.contextmanager
def stubbed(ffi: bool = False):
    """Make the mma16 launch path runnable on CPU tensors (see the module docstring).

    Yields {"fwd": StubKernel, "combine": StubKernel}; the fa512 caches (and the native warm
    call's signatures) are cleared on entry and exit so no launcher holding a stub outlives the
    block. ``ffi``: the kernels are the stubs as tvm-ffi functions, so the native warm call
    (`fa512.launch.native`) can launch them.
    """
    from fa512.backends import compile_cache
    from fa512.backends.registry import BACKENDS
    from fa512.launch import memo, native
    from fa512.planning.dispatch import Target

    stubs = {"fwd": StubKernel("fwd", describe=ffi), "combine": StubKernel("combine", describe=ffi)}
    kernels = {name: (stub.ffi() if ffi else stub) for name, stub in stubs.items()}
    h200 = Target("cuda", (9, 0), 132)
    saved = [
        (memo, "target_of", memo.target_of),
        (compile_cache, "get_kernel", compile_cache.get_kernel),
        (BACKENDS["mma16"], "unavailable", None),  # an instance attribute shadowing the method
        (torch._C, "_cuda_getCurrentRawStream", getattr(torch._C, "_cuda_getCurrentRawStream", None)),
    ]
    memo.target_of = lambda device: h200
    compile_cache.get_kernel = lambda spec, target_arch=None: kernels[spec.kind]
    BACKENDS["mma16"].unavailable = lambda: None
    torch._C._cuda_getCurrentRawStream = lambda index: 0
    memo.clear()
    native.clear()
    try:
        yield stubs
    finally:
        memo.clear()
        native.clear()
        for obj, name, value in saved:
            if value is None:
                if name in vars(obj):
                    delattr(obj, name)
            else:
                setattr(obj, name, value)


def _loop(api: str, q, k, v, kw, out, calls: int) -> None:
    import fa512

    if api == "attention":
        for _ in range(calls):
            fa512.attention(q, k, v, **kw)
    elif api == "attention_out":
        for _ in range(calls):
            fa512.attention(q, k, v, **kw, out=out)
    else:
        args = op_args(q, k, v, out, kw)
        fwd = torch.ops.fa512.fwd
        for _ in range(calls):
            fwd(*args)


def _rounds(api, q, k, v, kw, out, repeats, calls, cuda) -> tuple[list, list]:
    """``repeats`` timed rounds of ``calls`` calls: (host, device) us per call of each round."""
    host, dev = [], []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        _loop(api, q, k, v, kw, out, calls)
        host.append((time.perf_counter() - t0) / calls * 1e6)
        if cuda:
            end.record()
            end.synchronize()
            dev.append(start.elapsed_time(end) / calls * 1e3)
    return host, dev


def measure(case: str, api: str, device: str, repeats: int = 101, calls: int = 32, warmup: int = 20) -> dict:
    """us per warm call: host (perf_counter) and, on a GPU, device (CUDA events); median and min."""
    from fa512.launch.run import last_launch
    q, k, v, kw = make_call(CASES[case], device)
    out = torch.empty_like(q)
    _loop(api, q, k, v, kw, out, warmup)
    cuda = device == "cuda"
    gc.disable()  # as timeit: a collection inside a round is not the call's cost
    try:
        host, dev = _rounds(api, q, k, v, kw, out, repeats, calls, cuda)
    finally:
        gc.enable()
    row = dict(case=case, api=api, kernel=last_launch.get("kernel"), num_splits=last_launch.get("num_splits"),
               host_us_median=statistics.median(host), host_us_min=min(host))
    if cuda:
        row.update(device_us_median=statistics.median(dev), device_us_min=min(dev))
    return row


def profile(case: str, device: str, calls: int = 5000, top: int = 15) -> str:
    import io

    q, k, v, kw = make_call(CASES[case], device)
    _loop("attention", q, k, v, kw, None, 20)
    prof = cProfile.Profile()
    prof.runcall(_loop, "attention", q, k, v, kw, None, calls)
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


_FLOOR = []


def _dispatch_floor():
    """`profiles/dispatch_floor.py`'s probe module, built once per process; None if it cannot be."""
    if not _FLOOR:
        try:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import dispatch_floor

            _FLOOR.append(dispatch_floor.build())
        except Exception as exc:  # a profile extra: report and go on
            print(f"# dispatch floor probe unavailable: {type(exc).__name__}: {exc}", flush=True)
            _FLOOR.append(None)
    return _FLOOR[0]


def breakdown(case: str, device: str, calls: int = 32, floor: bool = False, rounds: int = 15) -> list:
    """us per warm call of each piece of the `fa512.attention` path (best of 5 rounds): the
    signature, the launcher lookup, the backend launch, the compiled function alone, and the
    torch pieces a launch uses. Where the pieces add up to less than ``run``, the rest is glue.
    ``floor``: also the op called through ``torch.ops`` and through the C++ dispatcher, each
    beside a no-op kernel with the same schema (`dispatch_floor`)."""
    from fa512.launch import memo, native
    from fa512.launch.run import run

    q, k, v, kw = make_call(CASES[case], device)
    out = torch.empty_like(q)
    args = op_args(q, k, v, out, kw)
    run(args)
    run(args)  # the first call registers the signature with the native warm call
    launcher = memo.launcher_for(args)
    fargs = launcher.args(args)
    state = getattr(launcher, "state", None)  # fa512.backends.cute.LaunchState
    fwd = state.fwd if state else None
    kk, vv = (k.view(torch.uint8), v.view(torch.uint8)) if k.dtype == torch.float8_e4m3fn else (k, v)
    lse = torch.empty(state.lse_shape, dtype=torch.float32, device=q.device) if state else None
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", lambda i: 0)
    ffi_args = None
    if state and state.combine is None and state.prepass is None and not state.fused:
        ffi_args = (q, kk, vv, out, lse, fargs.cu_seqlens_q, fargs.cu_seqlens_k, fargs.seqused_k, fargs.page_table,
                    fargs.q_descale, fargs.k_descale, fargs.v_descale, *state.scalars, None, None, None,
                    raw_stream(q.device.index or 0))
    launch_only = None  # the same variant cut after its launch (`Sm90FwdConfig.stage`): host cost of the call itself
    if ffi_args is not None and device == "cuda":
        from fa512.backends import compile_cache

        cfg = launcher.plan.config.with_split(False).with_(stage="launch")
        launch_only = compile_cache.get_kernel(compile_cache.KernelSpec("fwd", cfg))
    small = torch.zeros(16, device=q.device)
    mod = native.loaded()
    floor = _dispatch_floor() if floor else None

    def python_path():
        with native.bypassed():
            run(args)

    def native_mode(mode):  # the native call with kernels launched one way (fa512.backends.launch_shim)
        def call():
            previous = mod.set_direct(mode)
            try:
                mod.run(args)
            finally:
                mod.set_direct(previous)
        return call

    pieces = {
        "run (whole eager op body)": lambda: run(args),
        "native warm call alone (C++, fa512.launch.native)": (lambda: mod.run(args)) if mod else None,
        "native call, kernels' host functions (direct launch off)": native_mode(0) if mod else None,
        "native call, recorded launch via the DSL runtime": native_mode(1) if mod else None,
        "native call, recorded launch via cuLaunchKernelEx": native_mode(2) if mod else None,
        "native call, one graph launch (default)": native_mode(3) if mod else None,
        "run on the Python path (native off)": python_path if mod else None,
        "reference: small.add_(1) (one torch kernel launch)": lambda: small.add_(1),
        "op: torch.ops.fa512.fwd (Python call)": lambda: torch.ops.fa512.fwd(*args),
        "op floor: no-op kernel, same schema, torch.ops": (lambda: torch.ops.fa512_floor.fwd(*args)) if floor else None,
        "signature": lambda: memo.signature(args),
        "memo lookup (signature + dict + overlap check)": lambda: memo.launcher_for(args),
        "launcher (descale views + launch)": lambda: launcher(args),
        "compiled fwd call alone": (lambda: fwd(*ffi_args)) if ffi_args else None,
        "compiled fwd call, kernel cut after launch": (lambda: launch_only(*ffi_args)) if launch_only else None,
        "torch.empty lse": lambda: torch.empty((32, 64), dtype=torch.float32, device=q.device),
        "k.view(uint8)": lambda: k.view(torch.uint8),
        "raw stream": lambda: raw_stream(0),
    }
    rows = []
    for name, fn in pieces.items():
        if fn is None:
            continue
        for _ in range(50):
            fn()
        best = float("inf")
        for _ in range(rounds):
            if device == "cuda":  # rounds start on an idle GPU: a full launch queue would time the kernel
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best = min(best, (time.perf_counter() - t0) / calls * 1e6)
        rows.append((name, best))
    if floor is not None:  # the op from C++ (no Python parsing): torch's floor, and fa512::fwd
        for name, label in (("fa512_floor::fwd", "op floor: no-op kernel, same schema, C++ dispatcher"),
                            ("fa512::fwd", "op: fa512::fwd through the C++ dispatcher")):
            floor.dispatch_us(name, args, 50)
            rows.append((label, min(_after_sync(floor.dispatch_us, name, args, calls) for _ in range(rounds))))
    if device == "cuda":
        torch.cuda.synchronize()
        if mod is not None:
            rows.append((f"launch state (fwd, combine, prepass, graph): {mod.direct_state(args)}", float("nan")))
            for mode, label in ((0, "host functions"), (1, "runtime launch"), (2, "driver launch"),
                                (3, "graph launch")):
                previous = mod.set_direct(mode)
                try:
                    mod.stage_times(args, 50)
                    stages = min((_after_sync(mod.stage_times, args, calls) for _ in range(rounds)), key=sum)
                finally:
                    mod.set_direct(previous)
                names = ("lookup", "alloc", "launch", "result")
                rows.append((f"native stages, {label}: " + ", ".join(f"{n} {t:.2f}" for n, t in zip(names, stages)),
                             sum(stages)))
        api = hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
        rows.append((f"torch.Tensor has __dlpack_c_exchange_api__ (tvm-ffi fast path): {api}", float("nan")))
    return rows


def _after_sync(fn, *args):
    """fn(*args) once the GPU is idle (a full launch queue would time the kernels)."""
    torch.cuda.synchronize()
    return fn(*args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", nargs="*", choices=sorted(CASES), default=None, help="default: all")
    parser.add_argument("--api", nargs="*", choices=APIS, default=list(APIS))
    parser.add_argument("--repeats", type=int, default=101)
    parser.add_argument("--calls", type=int, default=32,
                        help="back-to-back calls per timed round (few: a full launch queue would time the GPU)")
    parser.add_argument("--stub", action="store_true", help="CPU tensors + stubs even where a GPU exists")
    parser.add_argument("--profile", action="store_true", help="cProfile the warm attention loop per case")
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--breakdown", action="store_true", help="time the pieces of one warm call per case")
    parser.add_argument("--floor", action="store_true",
                        help="with --breakdown: also torch's own op-call cost (profiles/dispatch_floor.py, ~40 s build)")
    args = parser.parse_args(argv)

    import fa512  # noqa: F401  (registers torch.ops.fa512.fwd)

    stub = args.stub or not torch.cuda.is_available()
    device = "cpu" if stub else "cuda"
    cases = args.case or list(CASES)
    from fa512.launch import native

    why = native.unavailable()  # builds the extension here, outside the timed loops
    print(f"# {'stubbed kernel, CPU tensors' if stub else torch.cuda.get_device_name()}; torch {torch.__version__}; "
          f"{args.repeats} rounds x {args.calls} calls; native warm call: {why or 'on'}")
    rows = []
    if args.breakdown:
        with stubbed() if stub else contextlib.nullcontext():
            for case in cases:
                for name, us in breakdown(case, device, floor=args.floor):
                    print(f"{case:20s} {name:45s} {us:7.2f} us", flush=True)
        return 0
    with stubbed() if stub else contextlib.nullcontext():
        for case in cases:
            for api in args.api:
                row = measure(case, api, device, args.repeats, args.calls)
                rows.append(row)
                extra = (f"  device {row['device_us_median']:7.2f} (min {row['device_us_min']:7.2f})"
                         if "device_us_median" in row else "")
                print(f"{case:20s} {api:14s} {row['kernel']}/{row['num_splits']}  host {row['host_us_median']:6.2f} us"
                      f" (min {row['host_us_min']:6.2f}){extra}", flush=True)
            if args.profile:
                print(profile(case, device))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(stub=stub, torch=torch.__version__, rows=rows), fh, indent=1)
    out_dir = os.environ.get("OUT")
    if out_dir and os.path.isdir(out_dir):
        with open(os.path.join(out_dir, "host_overhead.json"), "w") as fh:
            json.dump(dict(stub=stub, torch=torch.__version__, rows=rows), fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
