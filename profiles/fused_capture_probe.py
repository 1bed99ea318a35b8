"""Which part of a fused-combine call breaks a CUDA-graph capture (H200, one run, < 60 s once built).

On 2026-12-03 (profiles/results/2026-12-03-h200-s21) every graph holding two fused-combine calls
failed at the second one (`cudaErrorStreamCaptureInvalidated`, raised by the ``torch.zeros`` of
`fa512.backends.cute.split_counters`), and ``fa512 bench --modes latency`` failed the same way,
while a graph of one fused call whose signature had never been served natively passed. The
suspect: the Python path, serving the fused call the native side declines on a capturing stream,
registered the signature again; that replaced its native entry and destroyed the entry's graphs
(``~GraphCache``: cuGraphExecDestroy) inside the capture. The fix registers nothing while
capturing (`fa512.launch.native.register`); "old registration" below puts the old behaviour back.

Each variant prints one line, OK or FAILED with the exception; a capture that succeeds is
replayed (at two key lengths) and compared with an eager call: max |diff| of out and lse.

    PYTHONPATH=python:. python profiles/fused_capture_probe.py [--kernel fp8_mma|mma16] [--only SUBSTR]

The first SM90 call builds the native extension if this csrc/fast_call.cpp was never built
(~15 s, once; ``python -m fa512 native`` does it ahead) and compiles the fused variant unless
the compile cache has it (``fa512 compile`` / the session's fill step).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import traceback

import torch

# decode B=1 x 8k keys, Gemma-4 31B heads (32 q / 4 kv), fp8 e4m3 KV in 64-key pages: the
# latency case that plans a fused combine (fp8_mma: 32 splits, 128 CTAs)
BATCH, KEYS, HQ, HKV, PAGE = 1, 8192, 32, 4, 64
OTHER_KEYS = 5000  # the second replay's length
RESULTS: list = []


def line(name: str, ok: bool, detail: str) -> None:
    RESULTS.append((name, ok))
    print(f"{'OK    ' if ok else 'FAILED'}  {name:58s} {detail}", flush=True)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def drain() -> None:
    """Let a failed capture's leftovers (a pending error, unfinished work) surface here, not in
    the next variant."""
    for _ in range(2):
        try:
            torch.zeros(1, device="cuda").add_(1)
            torch.cuda.synchronize()
            return
        except Exception:  # a stale launch error is reported once, by the first check after it
            pass


@contextlib.contextmanager
def patched(obj, name: str, value):
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


# -- plain CUDA graphs: the driver calls alone --------------------------------------------------
def plain_capture(name: str, inside, mode: str = "global") -> None:
    """x = 1; capture (x += 1; inside(); x *= 3); replay twice: x = 24."""
    x = torch.ones(1024, device="cuda")
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    notes = []
    try:
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.graph(graph, stream=stream, capture_error_mode=mode):
            x.add_(1)
            notes.append(inside())
            x.mul_(3)
        x.fill_(1)
        graph.replay()
        graph.replay()
        torch.cuda.synchronize()
        diff = (x - 24).abs().max().item()
        line(name, diff == 0, f"replayed x == 24: max|diff| {diff:g}; {notes[0]}")
    except Exception as exc:
        line(name, False, first_line(exc) + (f" (after: {notes[0]})" if notes else ""))
        drain()


def plain_variants() -> None:
    from fa512.backends import cute

    def fa512_capture_info():
        stream = torch.cuda.current_stream().cuda_stream
        a, b = cute._capture_info(stream), cute._capture_info(stream)
        assert a == b and a[0] and a[1] != 0, (a, b)
        return f"(capturing, id) = {a}"

    plain_capture("(v) _capture_info (ctypes libcuda) alone in a capture", fa512_capture_info)

    had = "cuda.bindings.driver" in sys.modules

    def bindings_capture_info():  # the pre-fix _capture_id
        from cuda.bindings import driver

        err, status, cid, *_ = driver.cuStreamGetCaptureInfo(driver.CUstream(torch.cuda.current_stream().cuda_stream))
        assert err == driver.CUresult.CUDA_SUCCESS, err
        return f"status {int(status)}, id {int(cid)}; cuda.bindings.driver imported before: {had}"

    plain_capture("(v) cuda.bindings cuStreamGetCaptureInfo alone in a capture", bindings_capture_info)

    # the suspected mechanism by itself: what ~GraphCache (csrc/fast_call.cpp) does to a
    # signature's graphs, on a graph made and instantiated outside the capture
    for what, mode in (("cuGraphExecDestroy", "global"), ("cuGraphDestroy", "global"),
                       ("cuGraphExecDestroy", "thread_local"), ("cuGraphExecDestroy", "relaxed")):
        try:
            graph, exec_ = driver_graph()
        except Exception as exc:
            line(f"(vii) {what} of another graph in a capture, {mode}", False, f"setup: {first_line(exc)}")
            continue

        def destroy(what=what, graph=graph, exec_=exec_):
            lib = libcuda()
            rc = lib.cuGraphExecDestroy(exec_) if what == "cuGraphExecDestroy" else lib.cuGraphDestroy(graph)
            return f"{what} returned {rc}"

        plain_capture(f"(vii) {what} of another graph in a capture, {mode}", destroy, mode)


def libcuda():
    import ctypes

    return ctypes.CDLL("libcuda.so.1")


def driver_graph() -> tuple:
    """A one-node (empty node) graph and its instantiation, through the driver API."""
    import ctypes

    lib, graph, node, exec_ = libcuda(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    for rc, what in ((lib.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate"),
                     (lib.cuGraphAddEmptyNode(ctypes.byref(node), graph, None, ctypes.c_size_t(0)), "cuGraphAddEmptyNode"),
                     (lib.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, ctypes.c_ulonglong(0)),
                      "cuGraphInstantiateWithFlags")):
        if rc != 0:
            raise RuntimeError(f"{what} returned {rc}")
    return graph, exec_


# -- fa512 fused-combine calls -------------------------------------------------------------------
class Probe:
    def __init__(self, kernel: str):
        import fa512
        from fa512.tools.inputs import make_bench_case

        self.fa512, self.kernel = fa512, kernel
        kv = torch.bfloat16 if kernel == "mma16" else torch.float8_e4m3fn
        self.case = make_bench_case(heads=(HQ, HKV), q_lens=[1] * BATCH, k_lens=[KEYS] * BATCH, causal=True,
                                    page_size=PAGE, kv_dtype=kv, seed=7, device="cuda")
        self.kw = dict(self.case.kwargs(), kernel=kernel)
        self.stream = torch.cuda.Stream()
        c = self.case
        self.plan = fa512.plan(c.q, c.k, c.v, **self.kw)

    def call(self, out=None):
        c = self.case
        return self.fa512.attention(c.q, c.k, c.v, **self.kw, out=out)

    def reset(self) -> None:
        """A fresh process's state: no memo launchers, native entries (graphs destroyed here,
        outside any capture) or fused counters."""
        from fa512.backends import cute
        from fa512.launch import memo, native

        torch.cuda.synchronize()
        native.clear()
        memo.clear()
        cute._counters.clear()

    def eager(self, n: int) -> str:
        """n eager calls on the capture stream: the first through Python (registers the
        signature), the later ones through the native warm call (its graph for this stream)."""
        from fa512.launch import native

        mod = native.loaded()
        before = mod.graph_launches() if mod is not None else 0
        out = torch.empty_like(self.case.q)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            for _ in range(n):
                self.call(out)
        torch.cuda.synchronize()
        mod = native.loaded()
        graphs = (mod.graph_launches() - before) if mod is not None else 0
        return f"warm-up {n} eager ({graphs} native graph launches)"

    def capture(self, name: str, calls: int = 2, warm: int = 3, mode: str = "global", bypass: bool = False,
                old_registration: bool = False, premade_counters: bool = False, clear_memo: bool = False) -> None:
        from fa512.backends import cute
        from fa512.launch import memo, native

        self.reset()
        ctx = contextlib.ExitStack()
        with ctx:
            if bypass:
                ctx.enter_context(native.bypassed())
            if old_registration:  # pre-fix: the Python path registers the signature inside the capture too
                ctx.enter_context(patched(native, "_capturing", lambda call: False))
            try:
                warmed = self.eager(warm)
                if premade_counters:  # made (and zeroed) outside the capture; the kernels leave them zeroed
                    premade = torch.zeros(cute.COUNTER_WORDS, dtype=torch.int32, device="cuda")
                    ctx.enter_context(patched(cute, "split_counters", lambda device, stream: premade))
                if clear_memo:  # the launcher is rebuilt inside the capture (compile cache: in memory)
                    memo.clear()
                outs = [torch.empty_like(self.case.q) for _ in range(calls)]
                graph = torch.cuda.CUDAGraph()
                self.stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.graph(graph, stream=self.stream, capture_error_mode=mode):
                    lses = [self.call(out)[1] for out in outs]
            except Exception as exc:
                line(name, False, first_line(exc))
                if "--verbose" in sys.argv:
                    traceback.print_exc()
                drain()
                return
            detail = self.check(graph, outs, lses)
        line(name, detail[0], f"{warmed}; {detail[1]}")

    def check(self, graph, outs, lses) -> tuple:
        """Replays at two lengths against an eager call each: (all equal, text)."""
        sk = self.case.meta["seqused_k"]
        diffs = []
        try:
            for keys in (KEYS, OTHER_KEYS):
                sk.fill_(keys)
                graph.replay()
                torch.cuda.synchronize()
                want, want_lse = self.call()
                torch.cuda.synchronize()
                for out, lse in zip(outs, lses):
                    diffs.append(((out.float() - want.float()).abs().max().item(),
                                  (lse - want_lse).abs().max().item()))
        except Exception as exc:
            return False, f"replay: {first_line(exc)}"
        finally:
            sk.fill_(KEYS)
        d_out, d_lse = max(d[0] for d in diffs), max(d[1] for d in diffs)
        return d_out == 0 and d_lse == 0, f"replayed at {KEYS}, {OTHER_KEYS} keys: max|diff| out {d_out:g}, lse {d_lse:g}"


def fa512_variants(kernel: str, only: str) -> None:
    from fa512.launch import native

    t0 = time.perf_counter()
    mod = native.module()
    print(f"native warm call: {'on' if mod is not None else 'off (' + str(native.unavailable()) + ')'} "
          f"({time.perf_counter() - t0:.1f} s to load or build)", flush=True)
    probe = Probe(kernel)
    p = probe.plan
    print(f"plan: {p.kernel}, {p.num_splits} splits, combine {p.combine!r}, {p.ctas} CTAs", flush=True)
    if p.combine != "fused":
        print("fused_capture_probe: this plan does not fuse its combine; nothing to probe")
        sys.exit(2)
    t0 = time.perf_counter()
    probe.reset()
    probe.eager(1)
    print(f"first call (compile or load): {time.perf_counter() - t0:.1f} s", flush=True)
    variants = [
        # (i) the fixed tree as the tests use it
        ("(i) native on, warmed natively, 2 fused calls", {}),
        ("(i) native on, warmed natively, 1 fused call", dict(calls=1)),
        # the old behaviour: expected to fail if the re-registration is the cause ...
        ("(i-old) old registration, warmed natively, 2 calls", dict(old_registration=True)),
        ("(i-old) old registration, warmed natively, 1 call", dict(old_registration=True, calls=1)),
        # ... and to pass when no native graph was built (1 eager call, through Python only)
        ("(i-old) old registration, warmed by Python only, 2 calls", dict(old_registration=True, warm=1)),
        # (ii) no native path at all
        ("(ii) native bypassed, 2 fused calls", dict(bypass=True)),
        # (iii) capture modes: an unsafe call fails global and thread_local, passes relaxed
        ("(iii) old registration, thread_local", dict(old_registration=True, mode="thread_local")),
        ("(iii) old registration, relaxed", dict(old_registration=True, mode="relaxed")),
        ("(iii) native on, thread_local", dict(mode="thread_local")),
        ("(iii) native on, relaxed", dict(mode="relaxed")),
        # (iv) no allocation or memset of counters inside the capture
        ("(iv) counters pre-made before the capture", dict(premade_counters=True)),
        ("(iv) counters pre-made, old registration", dict(premade_counters=True, old_registration=True)),
        # (vi) the launcher built inside the capture (memo cleared after the warm-up)
        ("(vi) launcher rebuilt inside the capture", dict(clear_memo=True)),
    ]
    for name, kw in variants:
        if only in name:
            probe.capture(name, **kw)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="fp8_mma", choices=("fp8_mma", "mma16"))
    ap.add_argument("--only", default="", help="run the variants whose names contain this")
    ap.add_argument("--verbose", action="store_true", help="tracebacks of failed captures")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("fused_capture_probe: needs a CUDA GPU (SM90: H100/H200); torch.cuda.is_available() is False "
              f"(torch {torch.__version__}): nothing run")
        return 2
    if torch.cuda.get_device_capability() != (9, 0):
        print(f"fused_capture_probe: needs an SM90 GPU, got {torch.cuda.get_device_name()} "
              f"(sm_{''.join(map(str, torch.cuda.get_device_capability()))}): nothing run")
        return 2
    t0 = time.perf_counter()
    import fa512

    try:
        from cuda.bindings import __version__ as bindings_version
    except Exception:
        bindings_version = "?"
    print(f"== fused_capture_probe | {torch.cuda.get_device_name()} | torch {torch.__version__} "
          f"(CUDA {torch.version.cuda}) | cuda-bindings {bindings_version} | fa512 {fa512.__file__}", flush=True)
    plain_variants()
    fa512_variants(args.kernel, args.only)
    failed = [n for n, ok in RESULTS if not ok]
    print(f"== {len(RESULTS) - len(failed)} OK, {len(failed)} FAILED in {time.perf_counter() - t0:.0f} s")
    verdict = {n: ok for n, ok in RESULTS}
    fixed = verdict.get("(i) native on, warmed natively, 2 fused calls")
    old = verdict.get("(i-old) old registration, warmed natively, 2 calls")
    old_py = verdict.get("(i-old) old registration, warmed by Python only, 2 calls")
    relaxed = verdict.get("(iii) old registration, relaxed")
    destroy = verdict.get("(vii) cuGraphExecDestroy of another graph in a capture, global")
    destroy_relaxed = verdict.get("(vii) cuGraphExecDestroy of another graph in a capture, relaxed")
    if destroy is False and destroy_relaxed:
        print("driver: cuGraphExecDestroy inside a global-mode capture invalidates it (relaxed mode allows it)")
    elif destroy:
        print("driver: cuGraphExecDestroy inside a capture is harmless here: look past ~GraphCache for the cause")
    if fixed and old is False and old_py and relaxed:
        print("verdict: the re-registration inside the capture (its native graphs destroyed) was the cause; the fix holds")
    elif fixed and old is False:
        print("verdict: the old registration breaks the capture and the fix holds; see the other lines for why")
    elif fixed and old:
        print("verdict: the old registration passes here too: unless the warm-ups above show 0 native graph "
              "launches (no graph to destroy), the 2026-12-03 failure has another cause (see (iv), (v), (vi))")
    elif fixed is False:
        print("verdict: the fixed path still fails inside a capture: read the failing variants above")
    return 1 if fixed is False else 0


if __name__ == "__main__":
    sys.exit(main())
