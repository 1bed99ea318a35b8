"""fa512.integrations.transformers: attn_implementation="fa512" on a random-weight Gemma-4 text model.

CPU (float32, the reference kernel): fa512's logits equal sdpa's (rel L2 <= 1e-4) for prefill with and
without left padding and with bidirectional attention, greedy generation gives the same tokens
(DynamicCache, StaticCache), the d512 layers ran on fa512 and the d256 layers on sdpa (`served`), the
KV cache is read in place (also through the Triton kernel, interpreted), and calls fa512 cannot serve
exactly are delegated to sdpa with one warning. Continuous batching: generate_batch on
"paged|fa512" gives paged sdpa's tokens. GPU (bf16, mma16): the issue's acceptance on a 4k-token prompt.
"""

from __future__ import annotations

import os
import re
import warnings

import pytest
import torch

from helpers import interpreted_triton_fwd, load_profile, rel_l2

pytest.importorskip("transformers", reason="transformers is not installed (pip install 'fa512[transformers]')")
if not torch.cuda.is_available():
    # transformers imports triton (through torch._dynamo); on CPU the Triton tests need it imported
    # under the interpreter first (tests/test_triton_fwd.py does the same when collected first).
    interpreted_triton_fwd()

import fa512.integrations.transformers as fa512_hf  # noqa: E402  (registers attn_implementation="fa512")

LAYERS = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
# Hq=8; full layers 2 kv heads of 512 (GQA 4), sliding layers 4 kv heads of 256 and a window of 8
HEADS = dict(num_attention_heads=8, num_key_value_heads=4, num_global_key_value_heads=2)
VOCAB = 256
FULL, SLIDING = LAYERS.count("full_attention"), LAYERS.count("sliding_attention")
LOGITS_TOL = 1e-4  # float32 (the CPU acceptance)


@pytest.fixture(scope="module")
def profile():
    return load_profile("transformers_gemma4")


@pytest.fixture(scope="module")
def model(profile):
    return profile.make_model(LAYERS, hidden=64, vocab=VOCAB, heads=HEADS, sliding_window=8)


@pytest.fixture(autouse=True)
def _fresh_counts():
    fa512_hf.reset()
    yield
    fa512_hf.reset()


def _prompts(profile, pad):
    ids, mask = profile.make_prompts(3, 14, VOCAB, pad=pad, seed=3)
    if pad:
        mask[2, :1] = 0  # a third padding length
        ids[2, :1] = 0
    return ids, mask


def _logits(model, impl, ids, mask=None, mode=torch.no_grad):
    model.set_attn_implementation(impl)
    with mode():
        return model(ids, attention_mask=mask).logits


@pytest.mark.parametrize("pad", [0, 5], ids=["unpadded", "left-padded"])
def test_prefill_logits_match_sdpa(model, profile, pad):
    ids, mask = _prompts(profile, pad)
    ref = _logits(model, "sdpa", ids, mask if pad else None)
    out = _logits(model, "fa512", ids, mask if pad else None)
    assert rel_l2(out, ref) <= LOGITS_TOL
    assert fa512_hf.served == {("fa512", "reference"): FULL, ("sdpa", "head_dim 256"): SLIDING}


@pytest.mark.parametrize("pad,cache", [(0, "dynamic"), (5, "dynamic"), (5, "static")],
                         ids=["unpadded", "left-padded", "left-padded-static-cache"])
def test_greedy_generation_matches_sdpa(model, profile, pad, cache):
    ids, mask = _prompts(profile, pad)
    tokens = {}
    for impl in ("sdpa", "fa512"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=16, min_new_tokens=16, do_sample=False,
                                 pad_token_id=0, cache_implementation=cache)
        tokens[impl] = out[:, ids.shape[1]:]
    assert tokens["fa512"].shape == (3, 16)
    assert torch.equal(tokens["fa512"], tokens["sdpa"])
    assert len(set(tokens["sdpa"].flatten().tolist())) > 8, "degenerate generation would not test much"
    # sdpa's own run counts nothing; fa512's: the prefill and 15 decode steps, every d512 layer on fa512
    assert fa512_hf.served == {("fa512", "reference"): 16 * FULL, ("sdpa", "head_dim 256"): 16 * SLIDING}


def test_profile_reports_the_host_time_of_the_fa512_calls(model, profile, capsys):
    """`transformers_gemma4.py --profile`: one generate under cProfile, fa512's call path among the rows."""
    ids, mask = _prompts(profile, 0)
    profile.profile_generate(model, "fa512", ids, mask, new_tokens=3)
    printed = capsys.readouterr().out
    assert printed.startswith("profile fa512: generate of 3 tokens")
    # the prefill and 2 decode steps, each through every full layer
    assert re.search(rf"ms x +{3 * FULL}  _attend \(transformers.py:\d+\)", printed), printed


def test_profile_lists_the_syncing_host_calls(model, profile, capsys):
    """On CPU the reference kernel reads the sequence metadata to the host (tolist): the profile says so."""
    ids, mask = _prompts(profile, 0)
    profile.profile_generate(model, "fa512", ids, mask, new_tokens=2)
    line = [l for l in capsys.readouterr().out.splitlines() if "wait for the GPU" in l]
    assert len(line) == 1 and "'tolist'" in line[0], line


def test_sync_count_is_cuda_only(model, profile):
    ids, mask = _prompts(profile, 0)
    assert profile.count_syncs(model, "fa512", ids, mask, new_tokens=2) is None


def test_rounds_alternate_and_time_every_implementation(model, profile, monkeypatch):
    """`--rounds`: each round times every implementation once, the order reversed every other round."""
    order = []
    real = model.set_attn_implementation
    monkeypatch.setattr(model, "set_attn_implementation", lambda impl: (order.append(impl), real(impl))[1])
    ids, mask = _prompts(profile, 0)
    times = profile.time_rounds(model, ["fa512", "sdpa"], ids, mask, new_tokens=2, rounds=3)
    assert order == ["fa512", "sdpa", "sdpa", "fa512", "fa512", "sdpa"]
    assert {impl: len(ms) for impl, ms in times.items()} == {"fa512": 3, "sdpa": 3}
    assert all(t > 0 for ms in times.values() for t in ms)


def test_bidirectional_attention_matches_sdpa(profile):
    bidir = profile.make_model(LAYERS, hidden=64, vocab=VOCAB, heads=HEADS, sliding_window=8, bidirectional="all")
    ids, mask = _prompts(profile, 5)
    for m in (None, mask):
        ref = _logits(bidir, "sdpa", ids, m)
        assert rel_l2(_logits(bidir, "fa512", ids, m, mode=torch.inference_mode), ref) <= LOGITS_TOL
    assert fa512_hf.served == {("fa512", "reference"): 2 * FULL, ("sdpa", "head_dim 256"): 2 * SLIDING}


def test_cache_is_read_in_place(model, profile, monkeypatch):
    """The d512 layers hand fa512 views of the DynamicCache's own k/v (and of q), never copies."""
    from transformers import DynamicCache

    seen = []
    real = fa512_hf.attention

    def spy(q, k, v, **kw):
        seen.append((q, k, v, kw))
        return real(q, k, v, **kw)

    monkeypatch.setattr(fa512_hf, "attention", spy)
    ids, mask = _prompts(profile, 5)
    cache = DynamicCache(config=model.config)
    model.set_attn_implementation("fa512")
    with torch.no_grad():
        model(ids, attention_mask=mask, past_key_values=cache)
        seen.clear()
        step = torch.randint(3, VOCAB, (3, 1))
        model(step, attention_mask=torch.cat([mask, torch.ones(3, 1, dtype=mask.dtype)], 1), past_key_values=cache)
    full_layers = [i for i, t in enumerate(LAYERS) if t == "full_attention"]
    assert len(seen) == FULL
    for layer, (q, k, v, kw) in zip(full_layers, seen):
        keys, values = cache.layers[layer].keys, cache.layers[layer].values
        assert k.untyped_storage().data_ptr() == keys.untyped_storage().data_ptr()
        assert v.untyped_storage().data_ptr() == values.untyped_storage().data_ptr()
        # left padding: sequence 1 skips its 5 pad keys, sequence 2 its 1, through cu_seqlens_k / seqused_k
        rows = keys.stride(0) // keys.stride(2)
        assert kw["seqused_k"].tolist() == [15, 10, 14]
        assert kw["cu_seqlens_k"][:3].tolist() == [0, rows + 5, 2 * rows + 1]


@pytest.mark.parametrize("kernel,dtype,tol", [("auto", torch.float32, 1e-5), ("triton", torch.float16, 2e-3)],
                         ids=["reference", "triton"])
def test_cache_layouts_map_exactly(kernel, dtype, tol, monkeypatch):
    """A direct call over the key layouts the packed view reads in place, with left padding and without a
    mask; through the reference (float32) and a GPU kernel, Triton (on CPU: its interpreter, in fp16,
    which it computes right, unlike bf16)."""
    device = "cuda" if kernel == "triton" and torch.cuda.is_available() else "cpu"
    if kernel == "triton" and device == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # the kernels are interpreted (module import above)
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups, module.layer_idx = True, 4, 0
    g = torch.Generator().manual_seed(0)
    b, hq, hkv, q_len, k_len = 3, 8, 2, 2, 9
    query = torch.randn(b, q_len, hq, 512, generator=g).transpose(1, 2).to(device, dtype)
    base = torch.randn(2, b, hkv, k_len + 3, 512, generator=g).to(device, dtype)
    pad = torch.ones(b, k_len, dtype=torch.bool)
    pad[1, :4] = False
    pad[2, :1] = False
    mask = (pad[:, None, None, :] & (torch.arange(k_len) <= torch.arange(q_len)[:, None] + k_len - q_len)).to(device)
    layouts = {
        "contiguous": (base[0, :, :, :k_len].contiguous(), base[1, :, :, :k_len].contiguous()),
        "static-cache tail": (base[0, :, :, :k_len], base[1, :, :, :k_len]),  # batch stride covers 12 tokens
        "token-major": (base[0, :, :, :k_len].transpose(1, 2).contiguous().transpose(1, 2),
                        base[1, :, :, :k_len].transpose(1, 2).contiguous().transpose(1, 2)),
    }
    sdpa = fa512_hf.sdpa_attention_forward
    for name, (key, value) in layouts.items():
        for m in (mask, None):
            ref, _ = sdpa(module, query.float(), key.float(), value.float(), m, scaling=1.0)
            out, _ = fa512_hf._fa512_forward(kernel, module, query, key, value, m, scaling=1.0)
            assert out.shape == ref.shape == (b, q_len, hq, 512)
            assert rel_l2(out, ref) <= tol, name
    assert fa512_hf.served == {("fa512", "reference" if kernel == "auto" else kernel): 2 * len(layouts)}


def _one_warning(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
        fn()
    return [w for w in caught if issubclass(w.category, fa512_hf.Fa512DelegationWarning)]


@pytest.mark.parametrize("hole", ["right padding", "padding inside a sequence"])
def test_inexpressible_mask_delegates_with_one_warning(model, profile, hole):
    ids, mask = _prompts(profile, 0)
    if hole == "right padding":
        mask[1, -4:] = 0
    else:
        mask[1, 5:7] = 0
    ref = _logits(model, "sdpa", ids, mask)
    results = []
    caught = _one_warning(lambda: results.append(_logits(model, "fa512", ids, mask)))
    assert len(caught) == 1 and "runs on sdpa" in str(caught[0].message), [str(w.message) for w in caught]
    assert "one run of keys per sequence" in str(caught[0].message)
    for out in results:
        assert torch.equal(out, ref)  # every layer ran sdpa's own code on the same tensors
    (reason,) = [r for (impl, r) in fa512_hf.served if impl == "sdpa" and r != "head_dim 256"]
    assert fa512_hf.served[("sdpa", reason)] == 2 * FULL and ("fa512", "reference") not in fa512_hf.served


def test_gradients_and_unservable_kernels_delegate(model, profile):
    ids, _ = _prompts(profile, 0)
    ref = _logits(model, "sdpa", ids)
    model.set_attn_implementation("fa512")
    caught = _one_warning(lambda: model(ids))  # grad enabled: fa512 has no backward
    assert len(caught) == 1 and "forward-only" in str(caught[0].message)
    name = fa512_hf.register("fa512_triton_test", kernel="triton")  # Triton cannot take CPU tensors here
    caught = _one_warning(lambda: _logits(model, name, ids))
    assert len(caught) == 1 and "no fa512 kernel serves torch.float32 on cpu" in str(caught[0].message)
    assert "only the reference kernel computes in float32" in str(caught[0].message)
    assert torch.equal(_logits(model, name, ids), ref)
    with pytest.raises(ValueError, match="kernel"):
        fa512_hf.register("fa512_bad", kernel="mma17")


# -- continuous batching: "paged|fa512" ---------------------------------------------------------
def _generate_batch(model, impl, prompts, new_tokens=8):
    from transformers import ContinuousBatchingConfig, GenerationConfig

    pytest.importorskip("psutil", reason="transformers' continuous batching reads CPU memory through psutil")
    model.set_attn_implementation(impl)
    config = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, eos_token_id=1,
                              pad_token_id=0)
    # 64 tokens per batch: the 8 prompts (128 tokens) are split over batches, so later batches read cached keys
    try:
        out = model.generate_batch(prompts, generation_config=config, continuous_batching_config=ContinuousBatchingConfig(
            block_size=16, num_blocks=64, max_batch_tokens=64))
    except ValueError as e:  # transformers 5.24's continuous batching takes only its own implementations
        if "not supported for continuous batching" in str(e):
            pytest.skip(f"this transformers' continuous batching refuses {impl!r}: {e}")
        raise
    return [out[r].generated_tokens for r in sorted(out, key=lambda r: int(r.rpartition("_")[2]))]


def _mixed_prompts():
    g = torch.Generator().manual_seed(4)
    return [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in (5, 17, 9, 33, 2, 12, 40, 10)]


def test_generate_batch_matches_paged_sdpa(profile, monkeypatch):
    """8 prompts of mixed lengths: generate_batch on "paged|fa512" gives paged sdpa's greedy tokens. The
    model has only d512 full-attention layers: transformers' paged cache cannot hold Gemma-4's mixed
    head dims (test below)."""
    model = profile.make_model(["full_attention"] * 2, hidden=64, vocab=VOCAB,
                               heads=dict(HEADS, num_key_value_heads=2, head_dim=512))
    model.config.allow_global_per_layer_attribute_access = True  # one head_dim for all layers: safe
    page_tables = []
    real = fa512_hf._page_table
    monkeypatch.setattr(fa512_hf, "_page_table", lambda *a: page_tables.append(real(*a)) or page_tables[-1])
    prompts = _mixed_prompts()
    ref = _generate_batch(model, "paged|sdpa", prompts)
    out = _generate_batch(model, "fa512", prompts)
    assert out == ref and all(len(t) == 8 for t in out)
    assert page_tables, "no batch read the cache through a page table"
    assert set(fa512_hf.served) == {("fa512", "reference")}


def test_generate_batch_runs_other_head_dims_on_paged_sdpa():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, eos_token_id=1,
                                         bos_token_id=2)).eval()
    prompts = _mixed_prompts()
    assert _generate_batch(model, "fa512", prompts) == _generate_batch(model, "paged|sdpa", prompts)
    assert set(fa512_hf.served) == {("sdpa", "paged, head_dim 16")}


def test_block_causal_mask_equals_continuous_batchings():
    from transformers.generation.continuous_batching.utils import build_attention_mask

    cu_q, cu_k = [0, 3, 4, 9, 9], [0, 7, 8, 13, 13]  # a chunk over cached keys, a decode, a prefill, a padding sequence
    for window in (1, 3):
        ref = torch.full((1, 1, 11, 15), torch.finfo(torch.float32).min)
        build_attention_mask(ref, cu_q, cu_k, sliding_window=window)
        mask = fa512_hf.block_causal_mask(torch.tensor(cu_q), torch.tensor(cu_k), 11, 15, window if window > 1 else None, "cpu")
        assert torch.equal(mask, ref == 0)


def test_gemma4_continuous_batching_is_blocked_by_transformers_cache(profile):
    """The finding behind the closing note: transformers 5.17's PagedAttentionCache reads one
    num_key_value_heads / head_dim from the global config, which Gemma-4's per-layer config refuses."""
    from transformers.integrations.heterogeneity.configuration_utils import AmbiguousGlobalPerLayerAttributeError

    model = profile.make_model(LAYERS, hidden=64, vocab=VOCAB, heads=HEADS, sliding_window=8)
    with pytest.raises(AmbiguousGlobalPerLayerAttributeError):
        _generate_batch(model, "fa512", _mixed_prompts()[:2])


# -- GPU acceptance (issue 25): bf16 through mma16 on a 4k-token prompt -------------------------
# 31B heads (Hq=32; full layers Hkv=4 d512, sliding Hkv=16 d256), 6 layers (one full), hidden 1024. A
# vocabulary of 2048 keeps the top two logits of a random model apart by more than bf16 noise
# usually is, so that greedy tokens compare the attention, not ties.
GPU_VOCAB = 2048


def _gpu_model(profile):
    return profile.make_model(profile.gemma4_layers(6), hidden=1024, vocab=GPU_VOCAB, dtype=torch.bfloat16,
                              device="cuda")


@pytest.mark.gpu
def test_gpu_bf16_mma16_matches_sdpa_4k(profile):
    """Logits of the last 64 positions rel L2 <= 1e-2 and the same greedy tokens over 32 steps."""
    model = _gpu_model(profile)
    ids, mask = profile.make_prompts(1, 4096, GPU_VOCAB, seed=5, device="cuda")
    logits, tokens = {}, {}
    for impl in ("sdpa", "fa512"):
        fa512_hf.reset()
        model.set_attn_implementation(impl)
        with torch.no_grad():
            logits[impl] = model(ids, attention_mask=mask, logits_to_keep=64).logits.float()
            out = model.generate(ids, attention_mask=mask, max_new_tokens=32, min_new_tokens=32, do_sample=False,
                                 pad_token_id=0, output_scores=True, return_dict_in_generate=True)
        tokens[impl] = out.sequences[:, ids.shape[1]:]
        if impl == "sdpa":
            top2 = torch.stack(out.scores).float().topk(2, dim=-1).values
            gaps = (top2[..., 0] - top2[..., 1]).flatten().tolist()
    # the logits forward and 32 generation steps (a prefill and 31 decodes), the one d512 layer each
    assert fa512_hf.served == {("fa512", "mma16"): 33, ("sdpa", "head_dim 256"): 33 * 5}
    assert rel_l2(logits["fa512"], logits["sdpa"]) <= 1e-2
    same = (tokens["fa512"] == tokens["sdpa"])[0]
    first = None if bool(same.all()) else int((~same).nonzero()[0])
    assert first is None, f"greedy tokens differ from step {first}; sdpa's top-2 logit gap there {gaps[first]:.3g}"


@pytest.mark.gpu
def test_gpu_bf16_left_padded_batch_matches_sdpa(profile):
    """Batched left-padded prefill and decode through mma16 on the packed view of the cache."""
    model = _gpu_model(profile)
    ids, mask = profile.make_prompts(4, 1000, GPU_VOCAB, pad=300, seed=6, device="cuda")
    logits, tokens = {}, {}
    for impl in ("sdpa", "fa512"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            logits[impl] = model(ids, attention_mask=mask, logits_to_keep=64).logits.float()
            out = model.generate(ids, attention_mask=mask, max_new_tokens=8, min_new_tokens=8, do_sample=False,
                                 pad_token_id=0)
        tokens[impl] = out[:, ids.shape[1]:]
    valid = mask[:, -64:].bool()
    assert rel_l2(logits["fa512"][valid], logits["sdpa"][valid]) <= 1e-2
    assert torch.equal(tokens["fa512"], tokens["sdpa"])
    assert fa512_hf.served[("fa512", "mma16")] == 9 and len(fa512_hf.served) == 2


@pytest.mark.gpu
def test_gpu_unpadded_generation_has_no_fa512_sync(profile):
    """An unpadded greedy generate: the d512 layers run on mma16 and no line of fa512 (its
    transformers integration included) makes the host wait for the GPU (the syncs transformers
    makes itself, e.g. its per-token stop check, are not fa512's)."""
    model = _gpu_model(profile)
    ids, mask = profile.make_prompts(1, 512, GPU_VOCAB, seed=7, device="cuda")
    model.set_attn_implementation("fa512")
    with torch.no_grad():
        profile._greedy(model, ids, mask, 2)  # compile or load the kernels outside the count
    fa512_hf.reset()
    syncs = profile.count_syncs(model, "fa512", ids, mask, new_tokens=4)
    assert fa512_hf.served == {("fa512", "mma16"): 4, ("sdpa", "head_dim 256"): 4 * 5}
    package = os.path.dirname(fa512_hf.__file__).rpartition(os.sep)[0]  # .../python/fa512
    mine = {where: n for where, n in syncs.items() if where[0].startswith(package)}
    assert not mine, mine
