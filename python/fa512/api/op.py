"""The torch custom op ``torch.ops.fa512.fwd``: its schema, body and fake.

Schema (``out`` is written in place; only the lse is returned, as a fresh tensor)::

    fa512::fwd(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor? page_table,
               Tensor? cu_seqlens_k, Tensor cu_seqlens_q, SymInt max_seqlen_q,
               Tensor seqused_k, SymInt max_seqlen_k, float softmax_scale, bool causal,
               SymInt window_left, SymInt window_right, Tensor? q_descale,
               Tensor? k_descale, Tensor? v_descale, SymInt num_splits, str kernel,
               str precision="auto") -> Tensor

The raw op needs every argument but ``precision`` (in `fa512.call.Call` order); `fa512.attention` fills defaults
and allocates ``out``. Its body is `fa512.launch.run.run`. Once `fa512.launch.native` is loaded,
its C++ kernel serves the op on CUDA tensors (registered signatures launch in C++, anything else
calls the body). The op is opaque to torch.compile (its fake only validates shapes and builds
the lse), and its body does no host synchronisation on the kernel paths, so it can be captured
in a CUDA graph.
"""

from __future__ import annotations

import torch

from ..call import Call
from ..launch import native
from ..launch.run import run_positional
from ..planning.validate import check

SCHEMA = (
    "fwd(Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor? page_table, Tensor? cu_seqlens_k, "
    "Tensor cu_seqlens_q, SymInt max_seqlen_q, Tensor seqused_k, SymInt max_seqlen_k, float softmax_scale, "
    "bool causal, SymInt window_left, SymInt window_right, Tensor? q_descale, Tensor? k_descale, "
    "Tensor? v_descale, SymInt num_splits, str kernel, str precision=\"auto\") -> Tensor"
)


def _fwd_fake(*args):
    check(Call(*args))
    q = args[0]
    return q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


# Registered through torch.library.Library rather than torch.library.custom_op: the custom_op
# wrapper runs Python autograd and ADInplaceOrView kernels around the body, ~230 us per direct
# `torch.ops.fa512.fwd` call on the dev CPU against ~9 us for one dispatcher pass into a
# CompositeExplicitAutograd kernel (2026-11-29, no-op body). Without an autograd kernel, a call
# on inputs that require grad gets the dispatcher's autograd-not-implemented fallback.
# Eager `fa512.attention` calls the body directly: no dispatcher at all, and a bad scalar
# reaches validation (which names it) instead of the schema parser.
_lib = torch.library.Library("fa512", "DEF")
_lib.define(SCHEMA)
_lib.impl("fwd", run_positional, "CompositeExplicitAutograd")
torch.library.register_fake("fa512::fwd", _fwd_fake, lib=_lib)
native.set_python_fwd(run_positional)  # what the op's C++ CUDA entry runs for unknown signatures

__all__ = ["SCHEMA"]
