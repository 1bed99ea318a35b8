"""Does compute-sanitizer's racecheck see a named-barrier arrive -> sync hand-off?

The fp8_mma kernel's alternating warpgroups (``layout="alternate"``) hand P and the softmax state
to each other with ``bar.arrive`` by the writer and ``bar.sync`` by the reader (PTX: an arrive
synchronizes with a sync on the same barrier). racecheck reports its softmax-state loads as
hazards. This probe isolates the pattern: warpgroup 0 writes 128 words to shared memory and
arrives on named barrier 1; warpgroup 1 syncs on it, reads them and arrives on barrier 2, on which
the writer syncs before it rewrites them (three rounds). ``--mode sync`` makes the writer sync
on barrier 1 too (both sides wait), the control; ``--id-in-register`` passes the ids at run
time, as the kernel's per-warpgroup ids are.

    PYTHONPATH=python:. compute-sanitizer --tool racecheck python3 profiles/racecheck_barrier_probe.py --mode arrive
    PYTHONPATH=python:. compute-sanitizer --tool racecheck python3 profiles/racecheck_barrier_probe.py --mode sync

Either way the copied words must equal what was written (checked, printed last).

``--mode merge`` is the "decode_alt" tile's merge (session 31): each warpgroup first syncs
``--local0`` / ``--local1`` times on a 128-thread barrier of its own (4 + w: the per-block
max exchange and P^T hand-off, one pair per own key block), then both write 128 words, both
``bar.sync`` on barrier 8 (256 threads) and each reads the other's words. Equal counts are the
control; unequal ones are a tile whose key block count is odd.

    PYTHONPATH=python:. compute-sanitizer --tool racecheck python3 profiles/racecheck_barrier_probe.py --mode merge --local0 3 --local1 1
"""

from __future__ import annotations

import argparse

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32

WORDS = 128
ROUNDS = 3


class HandOff:
    def __init__(self, writer_waits: bool, id_in_register: bool = False):
        self.writer_waits = writer_waits
        self.id_in_register = id_in_register

    @cute.jit
    def __call__(self, out: cute.Tensor, one: Int32, stream: cuda.CUstream):
        MemRange, Align = cute.struct.MemRange, cute.struct.Align
        self.storage = cute.struct(type("S", (), {"__annotations__": {"w": Align[MemRange[Int32, WORDS], 16]}}))
        self.kernel(out, one).launch(grid=(1, 1, 1), block=(256, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, out: cute.Tensor, one: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        storage = cutlass.memory.SmemAllocator().allocate(self.storage)
        words = storage.w.get_tensor(cute.make_layout(WORDS))
        full, free = 1, 2
        if cutlass.const_expr(self.id_in_register):  # as the kernel's per-warpgroup ids (BAR_P_FULL + w)
            full, free = one, one + 1  # 1 and 2, passed at run time
        total = Int32(0)
        for r in cutlass.range_constexpr(ROUNDS):  # the slot is rewritten once the reader is done
            if tidx < 128:
                if cutlass.const_expr(r > 0):
                    cute.arch.barrier(barrier_id=free, number_of_threads=256)
                words[tidx] = tidx * 7 + 1 + r
                if cutlass.const_expr(self.writer_waits):
                    cute.arch.barrier(barrier_id=full, number_of_threads=256)
                else:
                    cute.arch.barrier_arrive(barrier_id=full, number_of_threads=256)
            else:
                cute.arch.barrier(barrier_id=full, number_of_threads=256)
                total += words[(tidx - 128 + 1) % WORDS]  # another thread's word
                if cutlass.const_expr(r < ROUNDS - 1):
                    cute.arch.barrier_arrive(barrier_id=free, number_of_threads=256)
        if tidx >= 128:
            out[tidx - 128] = total


class MergeAfterLocal:
    """Both warpgroups write, sync on one 256-thread barrier, read the other's words; before
    that each syncs ``locals_[w]`` times on a 128-thread barrier of its own."""

    def __init__(self, local0: int, local1: int):
        self.locals_ = (local0, local1)

    @cute.jit
    def __call__(self, out: cute.Tensor, one: Int32, stream: cuda.CUstream):
        MemRange, Align = cute.struct.MemRange, cute.struct.Align
        self.storage = cute.struct(type("S", (), {"__annotations__": {"w": Align[MemRange[Int32, 2 * WORDS], 16]}}))
        self.kernel(out, one).launch(grid=(1, 1, 1), block=(256, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, out: cute.Tensor, one: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        storage = cutlass.memory.SmemAllocator().allocate(self.storage)
        words = storage.w.get_tensor(cute.make_layout(2 * WORDS))
        wg = tidx // 128
        t = tidx % 128
        if tidx < 128:
            for _ in cutlass.range_constexpr(self.locals_[0]):
                cute.arch.barrier(barrier_id=4, number_of_threads=128)
        else:
            for _ in cutlass.range_constexpr(self.locals_[1]):
                cute.arch.barrier(barrier_id=5, number_of_threads=128)
        words[tidx] = tidx * 7 + 1
        cute.arch.barrier(barrier_id=8, number_of_threads=256)
        out[tidx] = words[(1 - wg) * WORDS + t]


def compile_probe(writer_waits: bool, arch_options: str = "", id_in_register: bool = False):
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    out = make_fake_tensor(Int32, (WORDS,), (1,), assumed_align=16)
    return cute.compile(HandOff(writer_waits, id_in_register), out, Int32(1), make_fake_stream(), options="--enable-tvm-ffi " + arch_options)


def main() -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("arrive", "sync", "merge"), default="arrive")
    p.add_argument("--id-in-register", action="store_true", help="barrier id computed at run time")
    p.add_argument("--local0", type=int, default=3, help="merge: warpgroup 0's own-barrier syncs first")
    p.add_argument("--local1", type=int, default=1, help="merge: warpgroup 1's")
    args = p.parse_args()
    if args.mode == "merge":
        from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

        fake = make_fake_tensor(Int32, (2 * WORDS,), (1,), assumed_align=16)
        fn = cute.compile(MergeAfterLocal(args.local0, args.local1), fake, Int32(1), make_fake_stream(),
                          options="--enable-tvm-ffi")
        out = torch.zeros(2 * WORDS, dtype=torch.int32, device="cuda")
        fn(out, 1, torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        tid = torch.arange(2 * WORDS, device="cuda", dtype=torch.int32)
        ok = torch.equal(out, ((tid + WORDS) % (2 * WORDS)) * 7 + 1)
        print(f"racecheck barrier probe, merge after {args.local0} / {args.local1} own-barrier syncs: "
              f"{'values ok' if ok else 'VALUES WRONG'}")
        return 0 if ok else 1
    fn = compile_probe(args.mode == "sync", id_in_register=args.id_in_register)
    out = torch.zeros(WORDS, dtype=torch.int32, device="cuda")
    fn(out, 1, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    want = (torch.arange(WORDS, device="cuda", dtype=torch.int32).roll(-1) * 7 + 1) * ROUNDS + sum(range(ROUNDS))
    ok = torch.equal(out, want)
    print(f"racecheck barrier probe, writer {'syncs' if args.mode == 'sync' else 'arrives'}: "
          f"{'values ok' if ok else 'VALUES WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
