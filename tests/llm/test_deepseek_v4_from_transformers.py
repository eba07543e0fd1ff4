"""``attention_from_transformers(DeepseekV4Attention, config)`` -> ``CompressedAttention``, against transformers' own
eager DeepSeek-V4 attention (sliding, CSA and HCA layers), built offline from tiny random configs
(``mha_lib.llm.deepseek_v4``: every parameter drawn, sinks and position biases included: transformers leaves them
``torch.empty``), called as the model calls it: both rotary settings, ``position_ids`` and the additive
sliding-window mask of ``transformers.masking_utils``.

Random configurations, 27 (``random.Random(seed)``), nine per layer kind: 1 to 8 heads of width 8-32, rotary
fraction 0.25-1, rates 2-8, windows 3-8, 1 to 4 output groups, default RoPE or YaRN, batch 1-2, T from below the
rate to 40, positions from 0 or from an offset, index_topk below, equal to and above the number of entries W.
Compared, float32:

    output     ≤ 1e-5 × max|transformers' output|; the weights (B, H, T, T + W) to 1e-5
    selection  CSA's entries per query equal transformers' indexer's (as sets; the inputs are checked tie-free
               first: ReLU gives exact-zero ties, GUIDE §13)
    pooling    compress_windows against a loop over the windows; entry_visibility against a loop and against
               transformers' own block bias
    traps      each of RoPE's pairs, the compress theta, the back-rotation and the top-k changes the output
               beyond the tolerance; transformers without a mask sees the future; the default HCA rate (128)
               gives a short input no entry; shifted positions move a compressed layer's output, not a sliding one's
"""

from __future__ import annotations

import random
import re

import pytest
import torch

import mha_lib
from mha_lib import CompressedAttention, YaRN, compress_windows, entry_visibility

pytest.importorskip("transformers")
from mha_lib.llm.deepseek_v4 import (  # noqa: E402
    V4_LAYERS,
    deepseek_v4_forward,
    deepseek_v4_inputs,
    deepseek_v4_selection,
    tiny_deepseek_v4,
)

KINDS = list(V4_LAYERS)  # sliding, csa, hca


def random_case(seed: int) -> dict:
    """One random configuration, its layer kind (seed % 3), the input's size and positions, and index_topk below,
    equal to or above the number of entries W (seed // 3 % 3)."""
    rng = random.Random(seed)
    kind = KINDS[seed % 3]
    heads = rng.choice([1, 2, 3, 4, 6, 8])
    head_dim = rng.choice([8, 16, 24, 32])
    fraction = rng.choice([0.25, 0.5, 0.75, 1.0])  # head_dim × fraction is even for all these
    rope_dim = int(head_dim * fraction)
    rate = rng.randint(2, 8)
    # T below the rate (no entry) once per kind (seeds 0, 13, 26), else at least two entries
    T = rng.randint(1, rate - 1) if seed % 13 == 0 else rng.randint(2 * rate, 40)
    W = T // rate
    k = [max(1, W - rng.randint(1, 3)), max(1, W), W + rng.randint(1, 4)][seed // 3 % 3]
    sizes = dict(hidden_size=rng.choice([16, 32, 48, 64]), num_attention_heads=heads, head_dim=head_dim,
                 q_lora_rank=rng.choice([8, 12, 16]), partial_rotary_factor=fraction,
                 compress_rates={"compressed_sparse_attention": rate, "heavily_compressed_attention": rate},
                 sliding_window=rng.randint(3, 8), o_groups=rng.choice([g for g in (1, 2, 3, 4) if heads % g == 0]),
                 o_lora_rank=rng.choice([4, 8, 12]), index_n_heads=rng.choice([8, 12, 16]),
                 index_head_dim=rope_dim + rng.choice([0, 4, 8]), index_topk=k, rms_norm_eps=rng.choice([1e-6, 1e-5]))
    if seed % 4 == 1:  # YaRN: transformers stretches the "compress" rotary only, with attention_factor 1
        factor = rng.choice([4, 16])  # × the original context = max_position_embeddings (512), as transformers wants
        sizes["rope_parameters"] = {"rope_type": "yarn", "factor": float(factor),
                                    "original_max_position_embeddings": 512 // factor}
    offset = rng.randint(1, 12) if seed % 3 != seed // 3 % 3 else 0
    return dict(kind=kind, sizes=sizes, B=rng.randint(1, 2), T=T, positions=torch.arange(T) + offset, seed=seed)


def close_to(actual, expected, relative=1e-5) -> float:
    bound = relative * expected.abs().max().item()
    difference = (actual - expected).abs().max().item()
    assert difference <= bound, f"max |difference| {difference:.3g} > {bound:.3g}"
    return difference


def assert_tie_free(layer, x, positions):
    """Each query that sees more than k entries has a gap between its k-th and (k+1)-th best index scores: the
    selection is not a matter of rounding."""
    scores = layer.index_scores(x, positions)  # (B, T, W), -inf where not visible
    k = layer.index_topk
    for t in range(x.shape[1]):
        best = scores[:, t].sort(dim=-1, descending=True).values
        if best.shape[-1] > k and bool(best[:, k].isfinite().all()):
            gap = (best[:, k - 1] - best[:, k]).abs().min().item()
            assert gap > 1e-4 * scores[scores.isfinite()].abs().max().item(), f"near tie at query {t}"


def same_selection(ours, theirs):
    """Per query, the same entries (order aside) and the same number of -1s."""
    assert ours.shape == theirs.shape
    assert torch.equal(ours.sort(dim=-1).values, theirs.sort(dim=-1).values)


def build(case):
    module, config = tiny_deepseek_v4(case["kind"], seed=case["seed"], **case["sizes"])
    x = torch.randn(case["B"], case["T"], config.hidden_size, generator=torch.Generator().manual_seed(case["seed"]))
    return module, config, mha_lib.attention_from_transformers(module, config), x


@pytest.mark.parametrize("seed", range(27))
def test_the_layer_equals_deepseek_v4_attention(seed):
    case = random_case(seed)
    module, config, layer, x = build(case)
    positions, kind = case["positions"], case["kind"]
    rate = config.compress_rates["compressed_sparse_attention"]  # the case's rate, for both compressed kinds
    assert isinstance(layer, CompressedAttention) and not layer.training
    assert layer.compress_rate == (None if kind == "sliding" else rate)
    assert layer.overlap == (kind == "csa") and (layer.indexer is not None) == (kind == "csa")
    assert layer.rope_dim == config.qk_rope_head_dim and layer.sliding_window == config.sliding_window
    expected, expected_weights = deepseek_v4_forward(module, config, x, positions)
    assert expected.isfinite().all()
    W = 0 if kind == "sliding" else case["T"] // rate
    with torch.no_grad():
        out, weights = layer(x, positions, return_weights=True)
        close_to(out, expected)
        assert weights.shape == expected_weights.shape == (case["B"], config.num_attention_heads, case["T"],
                                                           case["T"] + W)
        torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-5)
        if kind == "csa":
            assert_tie_free(layer, x, positions)
            same_selection(layer.select(x, positions), deepseek_v4_selection(module, config, x, positions))


def test_every_kind_of_rate_window_and_top_k_was_drawn():
    """The random cases cover what they claim: each kind with top-k below, at and above W (W > 0), T below the rate,
    offset positions; CSA queries that see more entries than they read; YaRN, 1 to 4 output groups, rates 2 to 8
    and windows 3 to 8."""
    cases = [random_case(seed) for seed in range(27)]
    for kind in KINDS:
        ours = [c for c in cases if c["kind"] == kind]
        rates = [c["sizes"]["compress_rates"]["compressed_sparse_attention"] for c in ours]
        drawn = {(c["sizes"]["index_topk"] > c["T"] // m) - (c["sizes"]["index_topk"] < c["T"] // m)
                 for c, m in zip(ours, rates) if c["T"] >= m}
        assert drawn == {-1, 0, 1}, kind
        assert any(c["T"] < m for c, m in zip(ours, rates)), kind
        assert any(int(c["positions"][0]) > 0 for c in ours), kind
    selecting = [c for c in cases if c["kind"] == "csa" and c["sizes"]["index_topk"] < int(entry_visibility(
        c["positions"], c["T"] // c["sizes"]["compress_rates"]["compressed_sparse_attention"],
        c["sizes"]["compress_rates"]["compressed_sparse_attention"]).sum(-1).max())]
    assert len(selecting) >= 3  # CSA cases where some query sees more entries than it reads
    assert {c["sizes"]["o_groups"] for c in cases} == {1, 2, 3, 4}
    assert any("rope_parameters" in c["sizes"] for c in cases if c["kind"] != "sliding")
    assert len({c["sizes"]["compress_rates"]["compressed_sparse_attention"] for c in cases}) >= 6
    assert {c["sizes"]["sliding_window"] for c in cases} == set(range(3, 9))


# ------------------------------------------------------------------------------------- the pooling, alone


def pooled_by_loop(kv, gate, bias, rate, overlap):
    """Entry w, one window at a time: its slots' values and gate + bias, a softmax over the slots per channel."""
    B, T, C = kv.shape
    Dh = C // 2 if overlap else C
    entries = []
    for w in range(T // rate):
        own = range(w * rate, (w + 1) * rate)
        if overlap:
            slots = [(kv[:, j, Dh:], gate[:, j, Dh:] + bias[j - w * rate, Dh:]) for j in own]
            if w > 0:  # the previous window's first series (window 0 has none)
                slots = [(kv[:, j, :Dh], gate[:, j, :Dh] + bias[j - (w - 1) * rate, :Dh])
                         for j in range((w - 1) * rate, w * rate)] + slots
        else:
            slots = [(kv[:, j], gate[:, j] + bias[j - w * rate]) for j in own]
        values = torch.stack([v for v, _ in slots], dim=1)  # (B, slots, Dh)
        weights = torch.stack([g for _, g in slots], dim=1).softmax(dim=1)
        entries.append((values * weights).sum(dim=1))
    return torch.stack(entries, dim=1) if entries else kv.new_zeros(B, 0, Dh)


@pytest.mark.parametrize("overlap", [False, True], ids=["HCA", "CSA"])
@pytest.mark.parametrize("seed", range(4))
def test_compress_windows_equals_a_loop_over_the_windows(seed, overlap):
    rng = random.Random(seed)
    rate, Dh = rng.randint(1, 8), rng.choice([1, 3, 8])
    B, T, C = rng.randint(1, 3), rng.randint(0, 30), (2 if overlap else 1) * Dh
    g = torch.Generator().manual_seed(seed)
    kv, gate = torch.randn(B, T, C, generator=g), torch.randn(B, T, C, generator=g) * 2
    bias = torch.randn(rate, C, generator=g)
    pooled = compress_windows(kv, gate, bias, rate, overlap=overlap)
    assert pooled.shape == (B, T // rate, Dh)
    torch.testing.assert_close(pooled, pooled_by_loop(kv, gate, bias, rate, overlap), rtol=0, atol=1e-6)


def test_an_overlapping_entry_reads_its_window_and_the_one_before_only():
    g = torch.Generator().manual_seed(0)
    kv, gate, bias = torch.randn(1, 16, 6, generator=g), torch.randn(1, 16, 6, generator=g), torch.zeros(4, 6)
    pooled = compress_windows(kv, gate, bias, 4, overlap=True)  # 4 entries of width 3
    changed = kv.clone()
    changed[:, 4:8] += 1.0  # window 1
    moved = (compress_windows(changed, gate, bias, 4, overlap=True) - pooled).abs().amax(dim=(0, 2))
    assert moved.tolist()[0] == 0 and moved.tolist()[3] == 0 and min(moved.tolist()[1:3]) > 0.01  # entries 1, 2


def test_entry_visibility_is_a_complete_window_and_equals_transformers_block_bias():
    for positions, entries, rate in [(torch.arange(11), 3, 3), (torch.arange(7) + 5, 4, 2), (torch.tensor([0]), 0, 4)]:
        expected = torch.tensor([[(w + 1) * rate <= t + 1 for w in range(entries)] for t in positions.tolist()],
                                dtype=torch.bool).view(len(positions), entries)
        assert torch.equal(entry_visibility(positions, entries, rate), expected)
    module, config = tiny_deepseek_v4("hca", seed=2)  # rate 8
    x = torch.randn(2, 27, config.hidden_size)
    for offset in (0, 6):
        position_ids = (torch.arange(27) + offset)[None].expand(2, -1)
        with torch.no_grad():
            _, block_bias = module.compressor(x, None, position_ids, None, module.layer_idx)  # (B, 1, T, W) 0 / -inf
        assert torch.equal(block_bias[:, 0] == 0, entry_visibility(position_ids[0], 3, 8).expand(2, -1, -1))


# ------------------------------------------------------------------------------------ traps and properties


def rotate_half_pairs(layer):  # pairs (i, i + dr/2) instead of DeepSeek's neighbours (2i, 2i + 1)
    layer._to_halves.copy_(torch.arange(layer.rope_dim))
    layer._to_pairs.copy_(torch.arange(layer.rope_dim))


def leading_dims(layer):  # RoPE on the first dr dimensions, as transformers' docstring says, not the trailing ones
    turn = layer._turn
    layer._turn = lambda x, positions, back=False: turn(x.roll(layer.rope_dim, -1), positions, back=back).roll(
        -layer.rope_dim, -1)


def main_theta(layer):  # the sliding layers' rotary ("main", 10,000) on a compressed layer
    layer.rope_speeds.copy_(mha_lib.rope_frequencies(layer.rope_dim, 10000.0))


def no_turn_back(layer):  # the output's rotary part left turned
    turn = layer._turn
    layer._turn = lambda x, positions, back=False: x if back else turn(x, positions)


def no_top_k(layer):  # every visible entry read
    layer.index_topk = 10**6


@pytest.mark.parametrize("mistake", [rotate_half_pairs, leading_dims, main_theta, no_turn_back, no_top_k],
                         ids=lambda f: f.__name__)
def test_each_convention_of_the_layer_is_needed(mistake):
    """The comparison can fail: each mistake moves the output far beyond the tolerance."""
    module, config = tiny_deepseek_v4("csa", seed=4, compress_rates={"compressed_sparse_attention": 2,
                                                                     "heavily_compressed_attention": 8},
                                      index_n_heads=8, index_topk=2, partial_rotary_factor=0.5)
    x = torch.randn(1, 24, config.hidden_size, generator=torch.Generator().manual_seed(4))
    expected, _ = deepseek_v4_forward(module, config, x)
    layer = mha_lib.attention_from_transformers(module, config)
    with torch.no_grad():
        close_to(layer(x), expected)
        mistake(layer)
        assert (layer(x) - expected).abs().max() > 1e-3 * expected.abs().max()


def test_transformers_without_a_mask_sees_the_future():
    module, config = tiny_deepseek_v4("sliding", seed=4)
    x = torch.randn(1, 12, config.hidden_size)
    expected, _ = deepseek_v4_forward(module, config, x)
    with torch.no_grad():
        unmasked, weights = module(x, **{**deepseek_v4_inputs(config, x), "attention_mask": None})
    assert weights[0, :, 0, 1:].sum() > 0.01  # the first query reads later tokens
    assert (unmasked - expected).abs().max() > 1e-3 * expected.abs().max()


def test_the_default_hca_rate_gives_a_short_input_no_entry():
    module, config = tiny_deepseek_v4("hca", seed=5, compress_rates=None)  # transformers' default rates: 4, 128
    layer = mha_lib.attention_from_transformers(module, config)
    assert layer.compress_rate == 128
    x = torch.randn(1, 40, config.hidden_size)
    expected, expected_weights = deepseek_v4_forward(module, config, x)
    out, weights = layer(x, return_weights=True)
    assert weights.shape == expected_weights.shape == (1, config.num_attention_heads, 40, 40)  # W = 0
    close_to(out, expected)


def test_shifted_positions_move_a_compressed_layer_but_not_a_sliding_one():
    """RoPE on raw tokens is relative: a sliding layer's output does not move when the positions shift. The entries
    sit at positions 0, m, 2m ... whatever the positions: a compressed layer's output moves (transformers' too)."""
    for kind, moves in (("sliding", False), ("hca", True), ("csa", True)):
        module, config = tiny_deepseek_v4(kind, seed=6, index_n_heads=8)
        layer = mha_lib.attention_from_transformers(module, config)
        x = torch.randn(1, 20, config.hidden_size, generator=torch.Generator().manual_seed(6))
        with torch.no_grad():
            here, there = layer(x), layer(x, torch.arange(20) + 4)
        theirs_here, _ = deepseek_v4_forward(module, config, x)
        theirs_there, _ = deepseek_v4_forward(module, config, x, torch.arange(20) + 4)
        close_to(here, theirs_here)
        close_to(there, theirs_there)
        shift = (here - there).abs().max().item()
        assert (shift > 1e-3 * here.abs().max().item()) == moves, (kind, shift)


def test_an_indexer_that_keeps_every_entry_is_the_layer_without_one():
    sizes = dict(q_lora_rank=8, rope_dim=4, sliding_window=3, o_groups=2, o_lora_rank=6, compress_rate=3,
                 overlap=True)
    torch.manual_seed(0)
    plain = CompressedAttention(24, 4, 8, **sizes)
    indexed = CompressedAttention(24, 4, 8, index_topk=5, index_heads=2, index_head_dim=4, **sizes)
    missing, unexpected = indexed.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and all(name.startswith("indexer.") for name in missing)
    with torch.no_grad():
        plain.sinks.normal_()
        indexed.sinks.copy_(plain.sinks)
    x = torch.randn(2, 17, 24)  # W = 5 entries: k = 5 keeps them all
    torch.testing.assert_close(indexed(x), plain(x), rtol=0, atol=0)
    indexed.index_topk = 2
    assert (indexed(x) - plain(x)).abs().max() > 1e-3
    picked = indexed.select(x)
    assert picked.shape == (2, 17, 2) and int(picked.max()) < 5
    first = entry_visibility(torch.arange(17), 5, 3).sum(-1)  # entries each query sees
    assert torch.equal((picked >= 0).sum(-1), first.clamp(max=2).expand(2, -1))


def _decoded_token_by_token(modules, config, x):
    """transformers' three layers stepped together through one ``DynamicCache`` (its DeepSeek-V4 cache layers), one
    token at a time, the mask built from the cache as the model builds it: the outputs ``(B, T, D)`` per layer."""
    from transformers import DynamicCache
    from transformers.masking_utils import create_sliding_window_causal_mask
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4RotaryEmbedding

    cache, rotary = DynamicCache(config=config), DeepseekV4RotaryEmbedding(config)
    outputs = {kind: [] for kind in modules}
    with torch.no_grad():
        for t in range(x.shape[1]):
            token, position = x[:, t:t + 1], torch.tensor([[t]])
            embeddings = {label: rotary(token, position, layer_type=label) for label in ("main", "compress")}
            mask = create_sliding_window_causal_mask(config=config, inputs_embeds=token, attention_mask=None,
                                                     past_key_values=cache, position_ids=position)
            for kind, module in modules.items():  # in layer order: the mask reads layer 0's cache
                out, _weights = module(token, position_embeddings=embeddings, position_ids=position,
                                       attention_mask=mask, past_key_values=cache)
                outputs[kind].append(out)
    return {kind: torch.cat(out, dim=1) for kind, out in outputs.items()}


@pytest.mark.parametrize("index_heads, same", [(8, True), (2, False)], ids=["8 indexer heads", "2: ties"])
def test_transformers_decoding_equals_the_one_call_forward_we_reproduce_unless_the_indexer_ties(index_heads, same):
    """Our layer equals transformers' one-call forward; its token-by-token decoding (DeepseekV4CSACache,
    DeepseekV4HCACache) gives the same outputs, so that forward is the layer's meaning. With 2 indexer heads, ReLU
    scores two entries exactly 0 for some query and the tie falls otherwise: the chapter's tiny layers use 8."""
    built = {kind: tiny_deepseek_v4(kind, seed=0, index_n_heads=index_heads) for kind in V4_LAYERS}
    modules, config = {kind: module for kind, (module, _c) in built.items()}, built["sliding"][1]
    x = torch.randn(1, 24, config.hidden_size, generator=torch.Generator().manual_seed(0))
    decoded = _decoded_token_by_token(modules, config, x)
    for kind, module in modules.items():
        expected, _weights = deepseek_v4_forward(module, config, x)
        equal = bool((decoded[kind] - expected).abs().max() <= 1e-5 * expected.abs().max())
        assert equal == (same or kind != "csa"), (kind, (decoded[kind] - expected).abs().max())
    if not same:  # the tie itself: two visible entries scored exactly 0 by our indexer too
        layer = mha_lib.attention_from_transformers(modules["csa"], config)
        scores = layer.index_scores(x)[0]  # (T, W), -inf where not visible
        assert any(int((row == 0).sum()) >= 2 for row in scores)


def test_the_module_is_strict_about_the_weights_it_reads():
    module, config = tiny_deepseek_v4("csa", seed=7)
    module.extra = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match=re.escape("the DeepSeek-V4 reader copies every parameter of a "
                                                   "compressed_sparse_attention layer, but the module has ['extra']")):
        mha_lib.attention_from_transformers(module, config)
    module, _ = tiny_deepseek_v4("hca", seed=7)  # rotary width 32 × 0.25 = 8
    _, other = tiny_deepseek_v4("hca", seed=7, partial_rotary_factor=0.5)  # 16: the same parameter shapes
    with pytest.raises(ValueError, match=re.escape("the module's compressor.rotary_emb.compress_inv_freq are not the "
                                                   "layer's 'compress' rotary speeds")):
        mha_lib.attention_from_transformers(module, other)
    module, config = tiny_deepseek_v4("sliding", seed=7)
    del module.sinks
    with pytest.raises(TypeError, match=re.escape("the DeepSeek-V4 reader reads DeepseekV4Attention (q_a_proj, ")):
        mha_lib.attention_from_transformers(module, config)
    module, config = tiny_deepseek_v4("sliding", seed=7, head_dim=12, partial_rotary_factor=0.25)  # int(3.0) = 3
    with pytest.raises(ValueError, match=re.escape("needs an even rotary width head_dim × partial_rotary_factor >= 2,"
                                                   " got int(12 × 0.25) = 3")):
        mha_lib.attention_from_transformers(module, config)
    assert mha_lib.TRANSFORMERS_READERS["DeepseekV4Attention"].__name__ == "_from_deepseek_v4"


def test_the_builder_sets_every_parameter_and_names_the_kinds():
    for kind in KINDS:
        module, _ = tiny_deepseek_v4(kind, seed=8)
        for name, parameter in module.named_parameters():
            assert parameter.isfinite().all() and parameter.abs().min() > 0, name  # no empty nor zero start left
    with pytest.raises(ValueError, match=re.escape("layer_type must be one of ['sliding', 'csa', 'hca'] (or "
                                                   "transformers' ['sliding_attention', ")):
        tiny_deepseek_v4("full")


# --------------------------------------------------------------------------------------------- bad input


def small(**changes) -> CompressedAttention:
    options = dict(q_lora_rank=8, rope_dim=4, sliding_window=3, o_groups=2, o_lora_rank=6, compress_rate=3,
                   overlap=True, index_topk=2, index_heads=2, index_head_dim=4)
    options.update(changes)
    return CompressedAttention(24, 4, 8, **options)


@pytest.mark.parametrize("changes, error, message", [
    (dict(rope_dim=3), ValueError, "rope_dim must be even (RoPE turns the dimensions in pairs) and at most head_dim "
                                   "= 8 (it turns each head's last rope_dim dimensions), got 3"),
    (dict(rope_dim=10), ValueError, "rope_dim must be even"),
    (dict(rope_dim=0), ValueError, "rope_dim must be a positive int (>= 1), got 0"),
    (dict(o_groups=3), ValueError, "o_groups must divide num_heads = 4 (each group projects whole heads), got 3"),
    (dict(compress_rate=None, index_topk=None, index_heads=None, index_head_dim=None), ValueError,
     "overlap=True needs compress_rate"),
    (dict(compress_rate=None, overlap=False), ValueError, "index_topk=2 needs compress_rate: the indexer picks among "
                                                          "the compressed entries"),
    (dict(index_head_dim=2), ValueError, "index_head_dim must be at least rope_dim = 4 (the indexer turns its last "
                                         "rope_dim dimensions), got 2"),
    (dict(index_topk=None), ValueError, "index_heads=2 and index_head_dim=4 needs index_topk"),
    (dict(index_heads=None), ValueError, "index_topk=2 needs index_heads too, got None"),
    (dict(compress_rate=0), ValueError, "compress_rate must be a positive int (>= 1), got 0"),
    (dict(overlap=1), TypeError, "overlap must be True or False, got int 1"),
    (dict(yarn=(4.0, 32)), TypeError, "yarn must be a mha_lib.YaRN or None, got tuple"),
    (dict(sliding_window=0), ValueError, "sliding_window must be a positive int (>= 1), got 0"),
    (dict(rope_theta=-1.0), ValueError, "rope_theta must be a finite float > 0, got -1.0"),
])
def test_bad_constructor_arguments_are_named(changes, error, message):
    with pytest.raises(error, match=re.escape(message)):
        small(**changes)


def test_bad_forward_arguments_are_named():
    layer, x = small(), torch.randn(2, 7, 24)
    cases = [
        (lambda: layer(torch.randn(2, 7, 16)), ValueError, "x has last dimension 16 (shape (2, 7, 16)), expected "
                                                           "d_model=24"),
        (lambda: layer(x, torch.arange(7.0)), TypeError, "positions must be an integer tensor (token positions 0, 1, "
                                                         "2, ...), got torch.float32"),
        (lambda: layer(x, torch.arange(6)), ValueError, "positions must hold one position per token: x has T = 7 "
                                                        "tokens, got 6 positions"),
        (lambda: layer(x, torch.arange(7) - 1), ValueError, "positions must be >= 0, got -1"),
        (lambda: layer(x, torch.arange(7)[None]), ValueError, "positions must be 1-D (T,), got 2-D shape (1, 7)"),
        (lambda: layer(x, return_weights="yes"), TypeError, "return_weights must be True or False, got str 'yes'"),
        (lambda: layer(x.double()), TypeError, "x has dtype torch.float64 but the module's weights are torch.float32"),
        (lambda: small(index_topk=None, index_heads=None, index_head_dim=None).select(x), ValueError,
         "select needs the indexer: build the layer with compress_rate, index_topk (and index_heads, index_head_dim)"),
        (lambda: small(index_topk=None, index_heads=None, index_head_dim=None).index_scores(x), ValueError,
         "index_scores needs the indexer"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=re.escape(message)):
            call()


def test_bad_pooling_arguments_are_named():
    kv, bias = torch.randn(1, 8, 6), torch.zeros(4, 6)
    cases = [
        (lambda: compress_windows(kv, kv[:, :7], bias, 4), ValueError, "gate must have kv's shape (B, T, C) = "
                                                                       "(1, 8, 6): one gate logit per number pooled"),
        (lambda: compress_windows(kv, kv, bias[:3], 4), ValueError,
         "position_bias must be (rate, C) = (4, 6): one bias per slot of a window and channel, got (3, 6)"),
        (lambda: compress_windows(kv[..., :5], kv[..., :5], bias[:, :5], 4, overlap=True), ValueError,
         "overlap=True needs an even number of channels C = 2·Dh (two series per token), got C = 5"),
        (lambda: compress_windows(kv, kv, bias, 0), ValueError, "rate must be a positive int (>= 1), got 0"),
        (lambda: compress_windows(kv[0], kv[0], bias, 4), ValueError, "kv must be 3-D (B, T, C), got 2-D"),
        (lambda: compress_windows(kv, kv.long(), bias, 4), TypeError, "gate must be a floating-point tensor"),
        (lambda: entry_visibility(torch.arange(4), -1, 2), ValueError, "entries must be an int in [0, inf], got -1"),
        (lambda: entry_visibility(torch.arange(4.0), 1, 2), TypeError, "positions must be an integer tensor"),
        (lambda: entry_visibility(torch.arange(4), 1, 0), ValueError, "rate must be a positive int (>= 1), got 0"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=re.escape(message)):
            call()


def test_yarn_is_read_for_the_compressed_layers_only():
    rope = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 32}
    for kind, stretched in (("sliding", False), ("csa", True), ("hca", True)):
        module, config = tiny_deepseek_v4(kind, seed=9, rope_parameters=dict(rope))
        layer = mha_lib.attention_from_transformers(module, config)
        assert (layer.yarn is not None) == stretched
        assert layer.rope_theta == (160000.0 if stretched else 10000.0) and layer.rope_gain == 1.0
        if stretched:
            assert layer.yarn == YaRN(16.0, 32, mscale=0.0, attention_factor=1.0)
