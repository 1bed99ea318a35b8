"""A random-weight Gemma-4 text model in Hugging Face transformers, run with
``attn_implementation="fa512"`` and with ``"sdpa"``: prefill and greedy generation, time, peak
memory and the difference of the logits.

Run from the repository root (no weights are downloaded; transformers 5.17)::

    PYTHONPATH=python:. python3 profiles/transformers_gemma4.py                      # CPU: tiny, float32
    PYTHONPATH=python:. python3 profiles/transformers_gemma4.py --prompt-len 4096    # GPU: bf16, mma16
    PYTHONPATH=python:. python3 profiles/transformers_gemma4.py --prompt-len 32768 --new-tokens 8
    PYTHONPATH=python:. python3 profiles/transformers_gemma4.py --prompt-len 4096 --profile   # host time per call
    PYTHONPATH=python:. python3 profiles/transformers_gemma4.py --prompt-len 4096 --rounds 6  # alternating re-timing

The model has the 31B head layout: 32 query heads; full-attention layers with 4 kv heads of
head_dim 512 (k = v projection, ``attention_k_eq_v``); sliding layers with 16 kv heads of 256 and a
1024-token window; layers in Gemma-4's pattern (5 sliding, then 1 full), ``--layers`` of them. On
a GPU the widths default to the 31B's (hidden 5376, vocab 262144) in bf16; on CPU to a tiny model
in float32 (the reference kernel). Weights are transformers' own random init (std 0.02), seeded.

Each implementation runs a warm-up of the same shapes (a prefill and two generated tokens, so fa512's
kernel variants are compiled or loaded before the clock starts), then a timed prefill of
``--batch`` prompts (``--pad`` tokens of left padding on every other prompt) keeping the logits
of the last ``--keep`` positions, then ``generate`` for ``--new-tokens`` greedy tokens. Peak memory
is CUDA's ``max_memory_allocated`` above what the model holds (CPU: not measured). An sdpa that
runs out of memory (the math path at d512 materialises the scores) is reported, not raised; with
torch 2.11 on an H200 (2026-12-04) it did not at 32k tokens (peak 10.8 GiB). The last lines
compare fa512 with sdpa: rel L2 and max abs difference of the kept logits, and the greedy tokens
that agree.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Optional

import torch

# The 31B layout's heads (Gemma-4 31B: 32 query heads; full layers 4 kv heads of 512, sliding
# layers 16 kv heads of 256).
HEADS_31B = dict(num_attention_heads=32, num_key_value_heads=16, head_dim=256, num_global_key_value_heads=4,
                 global_head_dim=512)


def make_model(layer_types, hidden=64, vocab=256, intermediate=None, heads=None, sliding_window=1024,
               bidirectional=None, dtype=torch.float32, device="cpu", seed=0):
    """A random-weight ``Gemma4ForCausalLM`` (eval mode). ``heads`` overrides `HEADS_31B`'s keys."""
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    layout = dict(HEADS_31B, **(heads or {}))
    config = Gemma4TextConfig(
        vocab_size=vocab, vocab_size_per_layer_input=vocab, hidden_size=hidden,
        intermediate_size=intermediate or 4 * hidden, num_hidden_layers=len(layer_types),
        layer_types=list(layer_types), sliding_window=sliding_window, hidden_size_per_layer_input=0,
        attention_k_eq_v=True, use_bidirectional_attention=bidirectional,
        pad_token_id=0, eos_token_id=1, bos_token_id=2, **layout,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = Gemma4ForCausalLM(config)
    return model.to(dtype).eval()


def gemma4_layers(n: int) -> list:
    """Gemma-4's layer pattern, 5 sliding then 1 full, ending on a full layer (as the config forces)."""
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)]
    types[-1] = "full_attention"
    return types


def make_prompts(batch, length, vocab, pad=0, seed=1, device="cpu"):
    """(input_ids, attention_mask): random tokens >= 3; every other prompt left-padded by ``pad``."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    for b in range(1, batch, 2):
        ids[b, :pad] = 0
        mask[b, :pad] = 0
    return ids.to(device), mask.to(device)


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


class _Peak:
    """CUDA peak allocation above the level at entry (GiB); None on CPU."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.gib: Optional[float] = None

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.gib = (torch.cuda.max_memory_allocated() - self.base) / 2**30
        self.seconds = time.perf_counter() - self.t0
        return False


def _greedy(model, ids, mask, new_tokens):
    return model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                          do_sample=False, pad_token_id=0)


def run_impl(model, impl, ids, mask, keep, new_tokens):
    """Warm-up, timed prefill and generate with one implementation: a dict of results."""
    model.set_attn_implementation(impl)
    result = {"impl": impl}
    device = ids.device
    oom = torch.cuda.OutOfMemoryError if device.type == "cuda" else ()
    try:
        with torch.no_grad():
            # Warm-up with the timed shapes: the prefill and the decode steps compile (or load) their
            # own kernel variants, which a shorter warm-up prompt would leave to the timed runs.
            model(ids, attention_mask=mask, logits_to_keep=1)
            _greedy(model, ids, mask, 2)
            with _Peak(device) as peak:
                logits = model(ids, attention_mask=mask, logits_to_keep=keep).logits
            result.update(prefill_s=peak.seconds, prefill_gib=peak.gib, logits=logits.float().cpu())
            del logits
            with _Peak(device) as peak:
                out = _greedy(model, ids, mask, new_tokens)
            result.update(generate_s=peak.seconds, generate_gib=peak.gib, tokens=out[:, ids.shape[1]:].cpu())
    except oom as e:
        result["error"] = f"out of memory ({str(e).splitlines()[0][:120]})"
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return result


def profile_generate(model, impl, ids, mask, new_tokens, rows=20):
    """One greedy ``generate`` under cProfile (after the timed runs, so nothing compiles): prints the
    wall time, then the host time per call of the functions in fa512 and in transformers' attention
    modules that took the most cumulative time. The GPU runs asynchronously, so a function's
    time is its host work plus any wait for the device inside it (a sync shows up there)."""
    import cProfile
    import pstats

    model.set_attn_implementation(impl)
    prof = cProfile.Profile()
    with torch.no_grad():
        t0 = time.perf_counter()
        prof.enable()
        _greedy(model, ids, mask, new_tokens)
        prof.disable()
        if ids.is_cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    stats = pstats.Stats(prof).stats  # (file, line, name) -> (calls, prim calls, tottime, cumtime, callers)
    mine = [(key, v) for key, v in stats.items() if "fa512" in key[0] or "sdpa_attention" in key[0]
            or key[0].endswith(("modeling_gemma4.py", "masking_utils.py"))]
    mine.sort(key=lambda kv: kv[1][3], reverse=True)
    print(f"profile {impl}: generate of {new_tokens} tokens {wall * 1e3:.1f} ms under cProfile; "
          f"host ms per call (cumulative), calls:")
    for (path, line, name), (calls, _, _, cum, _) in mine[:rows]:
        print(f"   {cum / calls * 1e3:8.3f} ms x {calls:5d}  {name} ({path.rpartition('/')[2]}:{line})")
    syncs = [(name, calls, cum) for (path, _, name), (calls, _, _, cum, _) in stats.items()
             if path == "~" and any(f"'{n}'" in name for n in _SYNCING)]
    print(f"   explicit host reads that wait for the GPU: "
          + (", ".join(f"{name} x {calls} ({cum * 1e3:.1f} ms)" for name, calls, cum in sorted(syncs)) or "none"))


def time_rounds(model, impls, ids, mask, new_tokens, rounds):
    """``rounds`` more timed ``generate`` calls per implementation, the order alternating (a b, b a,
    a b, ...) so a drift of the clocks or of the host falls on both: {impl: [ms per token, ...]}.
    The time per token is the whole generate's over ``new_tokens``, prefill included."""
    times = {impl: [] for impl in impls}
    with torch.no_grad():
        for r in range(rounds):
            for impl in (impls if r % 2 == 0 else impls[::-1]):
                model.set_attn_implementation(impl)
                with _Peak(ids.device) as peak:
                    _greedy(model, ids, mask, new_tokens)
                times[impl].append(peak.seconds / new_tokens * 1e3)
    return times


# Explicit host reads that wait for the GPU (a sync removes the overlap of host and device work).
# Implicit ones (bool() of a CUDA tensor) do not show in a profile: `count_syncs` sees those too.
_SYNCING = ("tolist", "item", "cpu", "synchronize", "_local_scalar_dense", "nonzero")


def count_syncs(model, impl, ids, mask, new_tokens):
    """{(file path, line): count} of the synchronizing CUDA operations in one greedy ``generate``
    (`torch.cuda.set_sync_debug_mode` "warn": one warning per sync, at the Python line that
    caused it), or None off CUDA."""
    import collections
    import warnings

    if not ids.is_cuda:
        return None
    model.set_attn_implementation(impl)
    seen = collections.Counter()
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            _greedy(model, ids, mask, new_tokens)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    for w in caught:
        if "synchroniz" in str(w.message):
            seen[w.filename, w.lineno] += 1
    return dict(seen)


def _fmt(x, unit, scale=1.0, digits=1):
    return "-" if x is None else f"{x * scale:.{digits}f} {unit}"


def main(argv=None):
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default=None,
                   help="default: bfloat16 on a GPU, float32 on CPU")
    p.add_argument("--layers", type=int, default=6, help="decoder layers in Gemma-4's 5:1 pattern (default 6)")
    p.add_argument("--hidden", type=int, default=None, help="default: 5376 (31B) on a GPU, 128 on CPU")
    p.add_argument("--vocab", type=int, default=None, help="default: 262144 on a GPU, 512 on CPU")
    p.add_argument("--prompt-len", type=int, default=None, help="default: 4096 on a GPU, 48 on CPU")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--pad", type=int, default=0, help="left padding of every other prompt (tokens)")
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--keep", type=int, default=64, help="positions whose logits are kept and compared")
    p.add_argument("--kernel", default="auto", help="fa512 kernel for the d512 layers (default: auto)")
    p.add_argument("--impls", default="fa512,sdpa")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=0,
                   help="after the timed runs, this many more timed generates per implementation, alternating")
    p.add_argument("--profile", action="store_true",
                   help="after the timed runs, one more generate per implementation under cProfile: the host "
                        "time per call of each attention function and of fa512's call path")
    a = p.parse_args(argv)

    on_gpu = torch.device(a.device).type == "cuda"
    dtype = getattr(torch, a.dtype or ("bfloat16" if on_gpu else "float32"))
    hidden = a.hidden or (5376 if on_gpu else 128)
    vocab = a.vocab or (262144 if on_gpu else 512)
    prompt_len = a.prompt_len or (4096 if on_gpu else 48)

    import fa512.integrations.transformers as fa512_hf

    impls = a.impls.split(",")
    if a.kernel != "auto":
        impls = [fa512_hf.register(f"fa512_{a.kernel}", kernel=a.kernel) if i == "fa512" else i for i in impls]
    model = make_model(gemma4_layers(a.layers), hidden=hidden, vocab=vocab, dtype=dtype, device=a.device, seed=a.seed)
    ids, mask = make_prompts(a.batch, prompt_len, vocab, pad=a.pad, seed=a.seed + 1, device=a.device)
    keep = min(a.keep, prompt_len)
    print(f"Gemma-4 text, {a.layers} layers ({gemma4_layers(a.layers).count('full_attention')} full d512 Hq=32/Hkv=4, "
          f"the rest sliding d256 Hkv=16), hidden {hidden}, vocab {vocab}, {dtype}, {a.device}; batch {a.batch} x "
          f"{prompt_len} tokens (left pad {a.pad} on every other), {a.new_tokens} greedy tokens")

    if on_gpu:  # a GPU run without the CuTe DSL is served by Triton: say so before the numbers
        from fa512.backends.registry import BACKENDS

        why = BACKENDS["mma16"].unavailable()
        if why is not None:
            print(f"note: fa512's SM90 kernels are unavailable here ({why}); 'auto' serves d512 with Triton")
    results = []
    for impl in impls:
        fa512_hf.reset()
        r = run_impl(model, impl, ids, mask, keep, a.new_tokens)
        r["served"] = dict(fa512_hf.served)
        results.append(r)
        if "error" in r:
            print(f"{impl:12s} {r['error']}")
            continue
        decode = (r["generate_s"] - r["prefill_s"]) / max(1, a.new_tokens - 1)
        print(f"{impl:12s} prefill {_fmt(r['prefill_s'], 'ms', 1e3)}, peak {_fmt(r['prefill_gib'], 'GiB', digits=2)}"
              f" | generate {_fmt(r['generate_s'], 's', digits=2)} (~{decode * 1e3:.1f} ms/token after prefill),"
              f" peak {_fmt(r['generate_gib'], 'GiB', digits=2)} | served {r['served']}")

    if a.rounds:
        done_impls = [r["impl"] for r in results if "error" not in r]
        for impl, ms in time_rounds(model, done_impls, ids, mask, a.new_tokens, a.rounds).items():
            print(f"{impl:12s} {a.rounds} more generates, alternating: " + " ".join(f"{t:.2f}" for t in ms)
                  + f" ms/token (median {statistics.median(ms):.2f}, prefill included)")

    if a.profile:
        for impl in impls:
            profile_generate(model, impl, ids, mask, a.new_tokens)
            syncs = count_syncs(model, impl, ids, mask, a.new_tokens)
            if syncs is not None:
                print(f"   syncs in one generate of {a.new_tokens} tokens ({impl}, set_sync_debug_mode): "
                      f"{sum(syncs.values())}: " + (", ".join(f"{path.rpartition('/')[2]}:{line} x {n}"
                                                              for (path, line), n in sorted(syncs.items())) or "none"))

    done = [r for r in results if "error" not in r]
    for r in done[1:]:
        ref = done[0]
        tokens_equal = (r["tokens"] == ref["tokens"]).all(dim=0)
        first_diff = int((~tokens_equal).nonzero()[0]) if not bool(tokens_equal.all()) else None
        print(f"{ref['impl']} vs {r['impl']}: logits rel L2 {rel_l2(ref['logits'], r['logits']):.2e}, max abs "
              f"{(ref['logits'] - r['logits']).abs().max().item():.2e} (last {keep} positions); greedy tokens equal "
              f"{int(tokens_equal.sum())}/{a.new_tokens} steps"
              + ("" if first_diff is None else f" (first difference at step {first_diff})"))
    return results


if __name__ == "__main__":
    main()
