"""The kernels the dispatch table can name, by name (`fa512.planning.dispatch.ROUTES` orders them)."""

from __future__ import annotations

from .cute import Fp8MmaBackend, Mma16Backend
from .reference import ReferenceBackend
from .triton import TritonBackend

BACKENDS = {b.name: b for b in (ReferenceBackend(), TritonBackend(), Mma16Backend(), Fp8MmaBackend())}

__all__ = ["BACKENDS"]
