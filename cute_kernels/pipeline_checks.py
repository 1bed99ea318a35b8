"""Trace-time checks of the kernel's synchronisation facts.

A wrong arrive count or tx byte count does not fail to compile: it hangs the GPU (too few
arrivals / bytes) or races (too many). These helpers recompute the expected numbers from
kernel facts when the kernel is traced and raise `PipelineCheckError` with the arithmetic,
so a mistake fails `cute.compile` on a CPU instead of hanging a GPU.
"""

from __future__ import annotations

WARP_SIZE = 32
NUM_NAMED_BARRIERS = 16  # id 0 is __syncthreads


class PipelineCheckError(AssertionError):
    """A pipeline or barrier fact contradicts the kernel layout."""


def check_tma_pipeline(name: str, *, producer_arrives: int, consumer_warps: int, consumer_arrives: int,
                       tx_bytes: int, boxes_bytes: int) -> None:
    """TMA pipeline: 1 elected producer arrival per stage, one elected arrival per consumer warp,
    and tx bytes equal to the bytes every TMA box of a stage writes (OOB boxes still count)."""
    if producer_arrives != 1:
        raise PipelineCheckError(f"{name}: a TMA producer arrives once per stage (elect_one), got {producer_arrives}")
    if consumer_arrives != consumer_warps:
        raise PipelineCheckError(
            f"{name}: consumer release is elected per warp, so the empty barrier needs {consumer_warps} "
            f"arrivals, got {consumer_arrives}"
        )
    if tx_bytes != boxes_bytes:
        raise PipelineCheckError(f"{name}: tx_count {tx_bytes} B != bytes of the stage's TMA boxes {boxes_bytes} B")


def check_named_barriers(ids: dict, counts: dict) -> None:
    """Named barrier ids are distinct, in 1..15, and their thread counts are whole warps."""
    seen = {}
    for name, bid in ids.items():
        if not 1 <= bid < NUM_NAMED_BARRIERS:
            raise PipelineCheckError(f"named barrier {name} id {bid} outside 1..15")
        if bid in seen:
            raise PipelineCheckError(f"named barriers {seen[bid]} and {name} share id {bid}")
        seen[bid] = name
    for name, n in counts.items():
        if n % WARP_SIZE:
            raise PipelineCheckError(f"named barrier {name} counts {n} threads, not a whole number of warps")


def check_register_split(producer_regs: int, consumer_regs: int, consumer_wgs: int, threads: int,
                         register_file: int = 65536) -> None:
    """setmaxnreg budgets: multiples of 8 in 24..256 and (P + C*wgs) * 128 <= the CTA's register pool.

    The pool is what the launch allocated, ``launch_regs x threads`` with launch_regs =
    floor(register_file / threads) rounded down to a multiple of 8 (168 at 384 threads: 64512),
    not the register file: `setmaxnreg.inc` blocks until the pool can serve it, so a budget that
    only fits 65536 waits forever (the 2026-11-29 H200 hang of 32 + 2 x 240).
    """
    for r in (producer_regs, consumer_regs):
        if r % 8 or not 24 <= r <= 256:
            raise PipelineCheckError(f"setmaxnreg count {r} is not a multiple of 8 in 24..256")
    if threads != 128 * (1 + consumer_wgs):
        raise PipelineCheckError(f"{threads} threads for 1 producer + {consumer_wgs} consumer warpgroups")
    launch_regs = min(255, register_file // threads) // 8 * 8
    pool = launch_regs * threads
    total = (producer_regs + consumer_wgs * consumer_regs) * 128
    if total > pool:
        raise PipelineCheckError(
            f"register budgets need ({producer_regs} + {consumer_wgs} x {consumer_regs}) x 128 = {total} registers "
            f"> the CTA pool {launch_regs} x {threads} = {pool}: setmaxnreg.inc would never return"
        )


def check_smem(total_bytes: int, limit: int) -> None:
    if total_bytes > limit:
        raise PipelineCheckError(f"shared memory {total_bytes} B exceeds {limit} B")


__all__ = [
    "PipelineCheckError",
    "check_tma_pipeline",
    "check_named_barriers",
    "check_register_split",
    "check_smem",
]
