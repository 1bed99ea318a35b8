"""The checked problem: everything a plan depends on, as host values (`Problem`), and the
tensors a launch reads (`FwdArgs`). Built by `fa512.planning.validate.check`; never reads device data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch


@dataclass(frozen=True)
class Problem:
    """Everything a plan depends on, as host values. Built from shapes; never reads device data."""

    batch: int
    total_q: int
    num_q_heads: int
    num_kv_heads: int
    q_dtype: torch.dtype
    kv_dtype: torch.dtype
    paged: bool
    page_size: int  # 0 for packed K/V
    max_pages_per_seq: int  # 0 for packed K/V
    kv_rows: int  # num_pages * page_size (paged) or total_k (packed)
    max_seqlen_q: int  # clamped to total_q
    max_seqlen_k: int  # clamped to the K/V capacity of one sequence
    softmax_scale: float
    causal: bool
    window_left: int  # -1 = unbounded
    window_right: int  # -1 = unbounded; causal resolves to 0
    descale_modes: tuple  # (q, k, v) modes from fa512.planning.descales
    device_type: str
    # "fast" | "accurate": the numerics the plan gives fp8_mma (`fa512.planning.precision`
    # resolves the call's "auto"; `validate.check` leaves the default, `make_plan` sets it)
    precision: str = "fast"

    @property
    def group_size(self) -> int:
        """Query heads per kv head (GQA ratio)."""
        return self.num_q_heads // self.num_kv_heads

    @property
    def kv_is_fp8(self) -> bool:
        return self.kv_dtype == torch.float8_e4m3fn

    @property
    def has_window(self) -> bool:
        return self.window_left >= 0 or self.window_right >= 0

    def shape_str(self) -> str:
        kv = f"paged(page={self.page_size})" if self.paged else "packed"
        mask = "causal" if self.causal else ("local" if self.has_window else "full")
        if self.has_window:
            mask += f"[{self.window_left},{self.window_right}]"
        return (
            f"B={self.batch} total_q={self.total_q} Hq={self.num_q_heads} Hkv={self.num_kv_heads} "
            f"max_q={self.max_seqlen_q} max_k={self.max_seqlen_k} q={_dt(self.q_dtype)} "
            f"kv={_dt(self.kv_dtype)} {kv} {mask}" + (" accurate" if self.precision == "accurate" else "")
        )


class FwdArgs(NamedTuple):
    """The tensors a kernel launch reads, with descales normalised to (B, Hkv) views."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    page_table: Optional[torch.Tensor]
    cu_seqlens_k: Optional[torch.Tensor]
    cu_seqlens_q: torch.Tensor
    seqused_k: torch.Tensor
    q_descale: Optional[torch.Tensor]
    k_descale: Optional[torch.Tensor]
    v_descale: Optional[torch.Tensor]


def _dt(dtype: torch.dtype) -> str:
    return {torch.float8_e4m3fn: "fp8e4m3", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(
        dtype, str(dtype).replace("torch.", "")
    )


__all__ = ["FwdArgs", "Problem"]
