"""Host time of a call whose signature is new against one the memo has seen (CPU, stubbed kernels).

A call's signature (`fa512.launch.memo.signature`) holds max_seqlen_k and, for packed K/V, the
row count. A decode loop whose max_seqlen_k grows by one each step misses the memo on the first
call of each step and pays the whole check -> plan -> launcher build; the step's other layers
hit. This times both on the paged B=64 x 8k decode shape (fp8 KV, mma16), with the kernel and
stream stubbed as in ``profiles/host_overhead.py --stub``:

    PYTHONPATH=python:. python3 profiles/cold_signature.py [--profile]

Dev VM, 2026-12-04: 16-23 us with the same max_seqlen_k, 319-323 us with a new one each call (618
in a third run, the machine busy; `profiles/results/2026-12-04-h200-s24/cold_signature_cpu.log`).
"""

import argparse
import statistics as st
import sys
import time

import torch

sys.path.insert(0, "profiles")
from host_overhead import stubbed  # noqa: E402

import fa512  # noqa: E402

B, HQ, HKV, D, PAGE, KEYS = 64, 32, 4, 512, 64, 8192


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--profile", action="store_true", help="cProfile the new-signature calls")
    a = ap.parse_args(argv)
    # room for every max_seqlen_k the loops use: a bound past the capacity is clamped to it, and
    # clamped calls would plan one problem (the planner's cache) instead of a new one each
    pages_per_seq = (2 * KEYS + a.calls) // PAGE + 1
    k = torch.empty(B * pages_per_seq, PAGE, HKV, D, dtype=torch.float8_e4m3fn)
    q = torch.randn(B, HQ, D, dtype=torch.bfloat16)
    kw = dict(page_table=torch.arange(B * pages_per_seq, dtype=torch.int32).view(B, pages_per_seq),
              cu_seqlens_q=torch.arange(B + 1, dtype=torch.int32), seqused_k=torch.full((B,), KEYS, dtype=torch.int32),
              max_seqlen_q=1, causal=True, kernel="mma16")

    def call(max_k):
        t0 = time.perf_counter()
        fa512.attention(q, k, k, max_seqlen_k=max_k, **kw)
        return time.perf_counter() - t0

    with stubbed():
        call(KEYS)
        same = [call(KEYS) for _ in range(a.calls)]
        grow = [call(KEYS + i) for i in range(1, a.calls + 1)]
        print(f"paged B={B} x {KEYS} decode, fa512.attention, kernels stubbed: the same max_seqlen_k "
              f"{st.median(same) * 1e6:.0f} us, a new max_seqlen_k each call {st.median(grow) * 1e6:.0f} us "
              f"(medians of {a.calls})")
        if a.profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            for i in range(1, a.calls + 1):
                call(2 * KEYS + i)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
