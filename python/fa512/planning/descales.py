"""Descale normalisation: every accepted descale shape becomes a (B, Hkv) view, never a copy.

Accepted shapes, and the strides of the view they become:

=============  ==========================  ==============
given shape    meaning                     view strides
=============  ==========================  ==============
``()``/(1,)    one scale for everything    (0, 0)
``(Hkv,)``     one scale per kv head       (0, s)
``(B, Hkv)``   per sequence and kv head    as given
=============  ==========================  ==============

Kernels index the view as ``descale[b, kv_head]``; the broadcast pattern (``mode``) is part of a
kernel's compile key, so a stride-0 view costs nothing at run time.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from ..errors import arg_error

DESCALE_NAMES = ("q_descale", "k_descale", "v_descale")


class Descale(NamedTuple):
    view: Optional[torch.Tensor]  # (B, Hkv) float32 view, or None for "no descale" (= 1.0)
    mode: str  # "none" | "scalar" | "per_head" | "per_batch_head"


def normalize_descale(
    name: str, t: Optional[torch.Tensor], batch: int, num_kv_heads: int, device: torch.device
) -> Descale:
    """Check ``t`` and return it as a (batch, num_kv_heads) view plus its broadcast mode."""
    if t is None:
        return Descale(None, "none")
    if not isinstance(t, torch.Tensor):
        raise arg_error(TypeError, name, type(t).__name__, "a float32 torch.Tensor or None")
    if t.dtype != torch.float32:
        raise arg_error(TypeError, name, f"dtype {t.dtype}", "torch.float32")
    if t.device != device:
        raise arg_error(ValueError, name, f"device {t.device}", f"q's device {device}")
    shape = tuple(t.shape)
    # An if-chain, not a dict: under torch.compile the sizes are SymInts, which do not hash.
    mode = None
    if shape in ((), (1,)):
        mode = "scalar"
    elif shape == (num_kv_heads,):
        mode = "per_head"
    elif shape == (batch, num_kv_heads):
        mode = "per_batch_head"
    if mode is not None:
        return Descale(descale_view(t, mode, batch, num_kv_heads), mode)
    raise arg_error(
        ValueError,
        name,
        f"shape {shape}",
        f"(), (1,), (Hkv,)=({num_kv_heads},) or (B, Hkv)=({batch}, {num_kv_heads})",
    )


def descale_view(t: Optional[torch.Tensor], mode: str, batch: int, num_kv_heads: int) -> Optional[torch.Tensor]:
    """The (batch, num_kv_heads) view of an already checked descale of the given mode."""
    if mode == "none":
        return None
    if mode == "scalar":
        return t.reshape(()).expand(batch, num_kv_heads)
    if mode == "per_head":
        return t.expand(batch, num_kv_heads)
    return t
