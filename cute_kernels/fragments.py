"""Register-fragment views and the warpgroup-MMA issue helper shared by the SM90 kernels.

SM90 wgmma accumulators (m64nN, fp32) hold, per thread, the values of two rows (r and r+8)
at columns 8*j + 2*(lane%4) + {0, 1}: the CuTe fragment shape is ((2, 2, N/8), MMA_M, MMA_N)
with mode 0 = (column pair, row half, 8-column group). The helpers below re-view that fragment
as a (rows, cols) matrix and as the A operand of a following 16-bit wgmma (the C fragment of an
m64n16 block is the A fragment of an m64k16 block for 16-bit types).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warpgroup


def acc_layout_mn(acc_layout: cute.Layout) -> cute.Layout:
    """((2, 2, V), M, N) -> ((2, M), (2, V, N)): mode 0 indexes rows, mode 1 columns."""
    compact = cute.make_layout(acc_layout.shape)
    sh, st = compact.shape, compact.stride
    mn = cute.make_layout(
        ((sh[0][1], sh[1]), (sh[0][0], sh[0][2], sh[2])),
        stride=((st[0][1], st[1]), (st[0][0], st[0][2], st[2])),
    )
    return cute.composition(acc_layout, mn)


def acc_mn_view(acc: cute.Tensor) -> cute.Tensor:
    return cute.make_tensor(acc.iterator, acc_layout_mn(acc.layout))


def acc_layout_as_a(acc_layout: cute.Layout) -> cute.Layout:
    """((2, 2, V), M, N) -> ((2, 2, 2), M, (V/2, N)): the A-operand view for k16 blocks."""
    split = cute.logical_divide(acc_layout, ((None, None, 2), None, None))
    sh, st = split.shape, split.stride
    return cute.make_layout(
        ((sh[0][0], sh[0][1], sh[0][2][0]), sh[1], (sh[0][2][1], sh[2])),
        stride=((st[0][0], st[0][1], st[0][2][0]), st[1], (st[0][2][1], st[2])),
    )


def acc_as_a_view(acc: cute.Tensor) -> cute.Tensor:
    return cute.make_tensor(acc.iterator, acc_layout_as_a(acc.layout))


@cute.jit
def wgmma(
    tiled_mma: cute.TiledMma,
    acc: cute.Tensor,
    tA: cute.Tensor,
    tB: cute.Tensor,
    zero_init: cutlass.Constexpr[bool],
):
    """Issue one (M, N, K) warpgroup MMA as K/16 (or K/32) instructions, no fence/commit/wait.

    A fresh atom is made so the ACCUMULATE field set here does not leak into later calls.
    """
    atom = cute.make_mma_atom(tiled_mma.op)
    atom.set(warpgroup.Field.ACCUMULATE, not zero_init)
    for k in cutlass.range_constexpr(cute.size(tA.shape[2])):
        cute.gemm(atom, acc, tA[None, None, k], tB[None, None, k], acc)
        atom.set(warpgroup.Field.ACCUMULATE, True)


def transpose_view(t: cute.Tensor) -> cute.Tensor:
    """Swap the first two modes of an smem tensor (a view, no data movement)."""
    rank = cute.rank(t)
    shape = (t.shape[1], t.shape[0], *[t.shape[i] for i in range(2, rank)])
    order = (1, 0, *range(2, rank))
    return cute.composition(t, cute.make_ordered_layout(shape, order=order))


__all__ = [
    "acc_layout_mn",
    "acc_mn_view",
    "acc_layout_as_a",
    "acc_as_a_view",
    "wgmma",
    "transpose_view",
]
