"""One-step probe kernels: the V transpose and the Q quantisation of `fp8_operands`, run alone.

Each probe loads its input into shared memory with the same layout the forward kernel's TMA
produces, runs the device function by two warpgroups exactly as `FlashFwdSm90` does (one d
half each), and copies the result back: the transpose as the raw shared-memory image of both
warpgroups' Vt tiles, the quantisation as e4m3 Q plus the row scales. tests/test_fp8_operands.py
compares them bit for bit with the Python models (`key_of_k`, `vt_word_index`, and
`fa512.numerics.emulation.quantize_q_rows`).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
from cutlass import Float8E4M3FN, Float32, Int32, Uint8, Uint32
from cutlass.cute.nvgpu import warpgroup

from .fp8_operands import quantize_q_half, transpose_v_half

HEAD_DIM = 512
HALF_D = 256
THREADS = 256  # two warpgroups, one d half each


def _struct(**fields):
    """A shared-memory struct type: name -> (dtype, elements, alignment)."""
    MemRange, Align = cute.struct.MemRange, cute.struct.Align
    ann = {name: Align[MemRange[dt, n], align] for name, (dt, n, align) in fields.items()}
    return cute.struct(type("ProbeStorage", (), {"__annotations__": ann}))


class TransposeProbe:
    """mVt (2, 256 * tile_n) uint8 <- the Vt tile of each warpgroup for V (tile_n, 512) e4m3."""

    def __init__(self, tile_n: int):
        assert tile_n in (32, 64)
        self.tile_n = tile_n

    @cute.jit
    def __call__(self, mV: cute.Tensor, mVt: cute.Tensor, rows_valid: Int32, stream: cuda.CUstream):
        atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, Float8E4M3FN)
        sV_layout = cute.tile_to_shape(atom, (self.tile_n, HEAD_DIM), order=(0, 1))
        self.storage = _struct(sV=(Uint8, self.tile_n * HEAD_DIM, 1024), sVt=(Uint8, 2 * HALF_D * self.tile_n, 1024))
        self.kernel(mV, mVt, rows_valid, sV_layout).launch(grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, mV: cute.Tensor, mVt: cute.Tensor, rows_valid: Int32, sV_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        n_v = self.tile_n * HEAD_DIM
        n_vt = 2 * HALF_D * self.tile_n
        storage = cutlass.memory.SmemAllocator().allocate(self.storage)
        sV = storage.sV.get_tensor(sV_layout.outer, swizzle=sV_layout.inner)
        mV8 = cute.make_tensor(cute.recast_ptr(mV.iterator, dtype=Uint8), mV.layout)
        for i in cutlass.range(tidx, n_v, THREADS, unroll=1):  # byte copy through the swizzled view
            sV[i % self.tile_n, i // self.tile_n] = mV8[i % self.tile_n, i // self.tile_n]
        cute.arch.barrier()
        chunks = cute.make_tensor(cute.recast_ptr(storage.sV.data_ptr(), dtype=Uint32),
                                  cute.make_layout((n_v // 16, 4), stride=(4, 1)))
        words = cute.make_tensor(cute.recast_ptr(storage.sVt.data_ptr(), dtype=Uint32), cute.make_layout(n_vt // 4))
        wg = tidx // 128
        transpose_v_half(chunks, 0, words, wg * (HALF_D * self.tile_n // 4), wg, tidx % 128, rows_valid, self.tile_n)
        cute.arch.barrier()
        raw = storage.sVt.get_tensor(cute.make_layout(n_vt))
        for i in cutlass.range(tidx, n_vt, THREADS, unroll=1):
            mVt[i // (n_vt // 2), i % (n_vt // 2)] = raw[i]


class QuantizeProbe:
    """(mQ8 (64, 512) uint8 e4m3 bits, mScale (2, 64) fp32) <- mQ (64, 512) bf16/f16.

    ``k_step_rows``: the decode layout's quantisation (`Sm90FwdConfig.qk_rows`): row 8c + i of
    each d half is query row i restricted to the half's k-step c (32 columns), zeros elsewhere,
    with that k-step's own scale; only rows 0..7 of mQ are read."""

    def __init__(self, k_step_rows: bool = False):
        self.k_step_rows = k_step_rows

    @cute.jit
    def __call__(self, mQ: cute.Tensor, mQ8: cute.Tensor, mScale: cute.Tensor, stream: cuda.CUstream):
        atom_q = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, mQ.element_type)
        atom_8 = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, Float8E4M3FN)
        sQ_layout = cute.tile_to_shape(atom_q, (64, HEAD_DIM), order=(0, 1))
        sQ8_layout = cute.tile_to_shape(atom_8, (64, HEAD_DIM), order=(0, 1))
        self.storage = _struct(scale=(Float32, 128, 16), sQ=(mQ.element_type, 64 * HEAD_DIM, 1024),
                               sQ8=(Float8E4M3FN, 64 * HEAD_DIM, 1024))
        self.kernel(mQ, mQ8, mScale, sQ_layout, sQ8_layout).launch(grid=(1, 1, 1), block=(THREADS, 1, 1),
                                                                   stream=stream)

    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mQ8: cute.Tensor, mScale: cute.Tensor, sQ_layout: cute.ComposedLayout,
               sQ8_layout: cute.ComposedLayout):
        tidx, _, _ = cute.arch.thread_idx()
        storage = cutlass.memory.SmemAllocator().allocate(self.storage)
        sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
        sQ8 = storage.sQ8.get_tensor(sQ8_layout.outer, swizzle=sQ8_layout.inner)
        for i in cutlass.range(tidx, 64 * HEAD_DIM, THREADS, unroll=1):
            sQ[i % 64, i // 64] = mQ[i % 64, i // 64]
        cute.arch.barrier()
        wg = tidx // 128
        scale = storage.scale.get_tensor(cute.make_layout(128))
        quantize_q_half(cute.local_tile(sQ, (64, HALF_D), (0, wg)), cute.local_tile(sQ8, (64, HALF_D), (0, wg)),
                        cute.local_tile(scale, (64,), (wg,)), tidx % 128, self.k_step_rows)
        cute.arch.barrier()
        sQ8_bits = storage.sQ8.get_tensor(sQ8_layout.outer, swizzle=sQ8_layout.inner, dtype=Uint8)
        for i in cutlass.range(tidx, 64 * HEAD_DIM, THREADS, unroll=1):
            mQ8[i % 64, i // 64] = sQ8_bits[i % 64, i // 64]
        if tidx < 128:
            mScale[tidx // 64, tidx % 64] = scale[tidx]


def fake_args(kind: str, tile_n: int = 64, q_dtype: str = "bf16"):
    """Fake tensors for compiling a probe without a GPU."""
    from cutlass import BFloat16, Float16
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    if kind == "transpose":
        v = make_fake_tensor(Uint8, (tile_n, HEAD_DIM), (HEAD_DIM, 1), assumed_align=16)
        vt = make_fake_tensor(Uint8, (2, HALF_D * tile_n), (HALF_D * tile_n, 1), assumed_align=16)
        return (v, vt, Int32(tile_n), make_fake_stream())
    qdt = {"bf16": BFloat16, "f16": Float16}[q_dtype]
    q = make_fake_tensor(qdt, (64, HEAD_DIM), (HEAD_DIM, 1), assumed_align=16)
    q8 = make_fake_tensor(Uint8, (64, HEAD_DIM), (HEAD_DIM, 1), assumed_align=16)
    sc = make_fake_tensor(Float32, (2, 64), (64, 1), assumed_align=16)
    return (q, q8, sc, make_fake_stream())


__all__ = ["TransposeProbe", "QuantizeProbe", "fake_args"]
