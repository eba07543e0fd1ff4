"""mha_lib: multi-head attention, one concept at a time.

The package is a small core — the attention the chapters teach — and a wing for each job around it. The core
imports no wing; a wing imports the core and the wings listed below it, never one above it.

    exercises/     the chapters' checkers (chapters 1-17)
    llm/           chapters 12-17: today's decoders (GQA, the KV cache, RoPE, windows, tiles, MLA): figures,
                   widgets, Llama, DeepSeek-V3 and 2025-26's families built offline
    trained/       chapter 10: a real trained encoder, its head roles, explorer and figures
    induction/     chapter 11: a tiny model that learns induction heads on the CPU
    display/       every chapter: printing, heatmaps, explorers, static widget pictures
    ─────────────
    core           functional  masks  positions  cache  modules  latent  compressed  linear  heads  conversions  sizes
                   validation  runtime  data  ablation  results  language

The core, top-down in the order the chapters teach it:

    functional.py   scores -> scaling -> softmax -> heads -> kernels (pure functions), and the tiled online
                    softmax of FlashAttention, flash_attention (chapter 14)
    masks.py        causal, padding and sliding-window masks, and converters between mask conventions
    positions.py    sinusoidal and rotary (RoPE) positions (chapter 13), YaRN's stretched RoPE (chapter 14)
    cache.py        KVCache: one layer's keys and values of the tokens already seen (chapter 12)
    modules.py      SelfAttention -> CausalAttention -> wrapper -> MultiHeadAttention -> fused;
                    MultiHeadAttention also shares key/value heads (GQA), rotates (RoPE), windows, caches, and
                    controls its scores (QK-norm, scale, soft-cap, sinks, output gate, partial RoPE: chapter 15)
    latent.py       MultiHeadLatentAttention: DeepSeek's keys and values through one cached latent (chapter 14);
                    with index_topk, DeepSeek-V3.2's sparse attention: a LightningIndexer picks the keys each query
                    reads, applied as a mask or gathered (chapter 17)
    compressed.py   CompressedAttention: DeepSeek-V4's attention, a sliding window plus entries that each pool m
                    tokens (compress_windows), all of them (HCA) or the top k of an indexer (CSA) (chapter 17)
    linear.py       a state instead of a cache (chapter 16): linear attention (T × T and running-state forms),
                    the delta rule (token by token and chunked), GatedDeltaNet (Qwen3-Next's linear layer) and
                    its StateCache
    heads.py        three ways to form heads: projection, direct split, grouped 1×1 convolution
    conversions.py  move weights between those layers (and into nn.MultiheadAttention); attention_from_transformers
                    reads twelve decoder families' attention from transformers (Llama ... gpt-oss, DeepSeek-V3,
                    V3.2 and V4) and Qwen3-Next's Gated DeltaNet
    sizes.py        parameter counts (chapter 7), KV-cache bytes of published decoders (chapters 12, 14, 15), the
                    fixed state of their linear-attention layers (chapter 16) and the indexer's keys (chapter 17)
    data.py         the small inputs the notebooks use;  runtime.py  device and reproducibility
    validation.py   argument checks with messages a student can act on
    ablation.py     knocking heads out: the one tool chapters 10 and 11 share
    language.py     set_language("zh-CN"): the wings' messages, figure labels and checkers in Chinese (gettext)
    results.py      saved measurements: chapter 9's kernels, chapter 12's KV cache (benchmark_results/, in the wheel)

display/ — everything that draws or prints (matplotlib and ipywidgets loaded on first use):

    printing.py     ``show``, ``show_table``: device-independent printing;  plotting.py  per-head heatmaps
    render.py       the explorers' PNG engine;  widgets.py  the explorers;  fonts.py  CJK glyphs for token labels
    static_widgets.py  widget cells saved with a static picture (a Jupyter pre-save hook)
    controls.py     every explorer's sliders and menus, one layout rule
    single_head.py … efficiency_figures.py   chapters 1–9's own figures and explorers (see display/__init__.py)

trained/ — chapter 10, a trained model (imported on use, so ``import mha_lib`` never loads transformers):

    pretrained.py   all-MiniLM-L6-v2 offline; BERT attention -> MultiHeadAttention; the encoder on it; ablation
    head_roles.py   per-head scores (previous/next/own token, [CLS], [SEP], entropy, coreference)
    corpus.py       the chapter's sentences;  explorer.py / plots.py  its explorer and figures

induction/ — chapter 11, heads that learn on the CPU:

    model.py        a tiny attention-only causal transformer, its repeated-segment task, training, scores and
                    the three shipped runs (checkpoints/, written by tests/train_induction.py)
    plots.py / trainer.py  its figures, and the live trainer widget (model.py also generates, with a KV cache)

llm/ — chapters 12 to 15, the attention of today's decoders (imported on use: transformers only in llama.py,
deepseek.py, families.py and smollm2.py):

    llama.py        a tiny transformers LlamaAttention built offline, called as Llama calls it
    sharing.py      chapter 12: heads grouped by shared key/value head, the G slider, the cache filling up
    rotary.py       chapter 13: rotations, frequencies, the offset widget, windows and their reach
    deepseek.py     a tiny transformers DeepseekV3Attention built offline, called as DeepSeek-V3 calls it
    scale.py        chapter 14: the memory wall, the online softmax walked block by block, tiles, MLA designs
    families.py     chapter 15: ten families' attention from transformers built offline (Qwen3, OLMo, Gemma 2/3,
                    gpt-oss, Qwen3-Next, Llama 4, ...), called with their own rotary and mask
    smollm2.py      chapter 15: SmolLM2-135M-Instruct offline (GGUF -> cached float32), first-token mass,
                    StreamingLLM's experiment
    attention_controls.py  chapter 15: the soft-cap and partial-RoPE widgets, first-token heatmaps, chapter 11's
                    model trained plain / with sinks / with a gate

exercises/ — the chapters' exercise checkers, one module per chapter.
"""

from .cache import KVCache
from .compressed import CompressedAttention, compress_windows, entry_visibility
from .conversions import (
    TRANSFORMERS_READERS,
    attention_from_deepseek,
    attention_from_llama,
    attention_from_transformers,
    fused_from_split,
    split_from_wrapper,
    torch_mha_from,
)
from .data import (
    JOURNEY_TOKENS,
    WALKTHROUGH_SENTENCE,
    WALKTHROUGH_TOKENS,
    embed_tokens,
    journey_batch,
    journey_inputs,
    tokenize,
    toy_sentence,
)
from .functional import (
    KERNELS,
    OnlineSoftmaxState,
    attention_scores,
    expand_kv_heads,
    explicit_attention,
    flash_attention,
    flash_kernel,
    masked_softmax,
    merge_attention_states,
    merge_heads,
    merge_heads_flat,
    online_softmax_start,
    online_softmax_step,
    scale_factor,
    scale_scores,
    sdpa_attention,
    softcap_scores,
    softmax_with_sinks,
    split_heads,
    split_heads_flat,
    stable_softmax,
)
from .heads import HEAD_FORMERS, DirectSplitHeads, GroupedConvHeads, ProjectionHeads, make_head_former
from .language import get_language, set_language
from .latent import LightningIndexer, MultiHeadLatentAttention
from .linear import GatedDeltaNet, StateCache, delta_rule, linear_attention, linear_attention_weights
from .masks import (
    additive_mask,
    causal_mask,
    causal_mask_at,
    combine_masks,
    invert_mask,
    mask_from_allowed,
    mask_from_blocked,
    mask_from_key_padding,
    mask_from_valid_lens,
    sliding_window_mask,
)
from .modules import (
    CausalAttention,
    FusedMultiHeadAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    SelfAttention,
)
from .positions import (
    YaRN,
    apply_rope,
    apply_rope_interleaved,
    interleaved_order,
    rope_cos_sin,
    rope_frequencies,
    rotate_half,
    sinusoidal_positions,
    yarn_mscale,
)
from .runtime import get_device, make_reproducible
from .sizes import (
    DECODER_CONFIGS,
    GPT_CONFIGS,
    MIXED_WINDOW_CONFIGS,
    HYBRID_CONFIGS,
    SPARSE_CONFIGS,
    DecoderAttention,
    GPTConfig,
    LinearAttentionSizes,
    SparseDecoderAttention,
    attention_parameter_count,
    gpt_parameter_count,
    interleaved_layer_types,
    kv_cache_bytes,
    latent_attention_parameter_count,
)
from .validation import divisors

__version__ = "0.1.0"


# The display wing's two names that every chapter uses, loaded on first use: the core imports no wing, and
# ``import mha_lib`` stays light (matplotlib is heavy)
_FROM_DISPLAY = {"plot_heads": "plotting", "show": "printing", "show_table": "printing"}


def __getattr__(name):
    if name in _FROM_DISPLAY:
        from importlib import import_module

        value = globals()[name] = getattr(import_module(f".display.{_FROM_DISPLAY[name]}", __name__), name)
        return value
    raise AttributeError(f"module 'mha_lib' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_FROM_DISPLAY})


__all__ = [
    "CompressedAttention", "compress_windows", "entry_visibility",
    "GatedDeltaNet", "StateCache", "delta_rule", "linear_attention", "linear_attention_weights", "HYBRID_CONFIGS",
    "LinearAttentionSizes", "LightningIndexer", "SPARSE_CONFIGS", "SparseDecoderAttention",
    "MultiHeadLatentAttention", "OnlineSoftmaxState", "YaRN", "attention_from_deepseek", "flash_attention",
    "flash_kernel", "latent_attention_parameter_count", "online_softmax_start", "online_softmax_step", "yarn_mscale",
    "merge_attention_states", "softcap_scores", "softmax_with_sinks", "MIXED_WINDOW_CONFIGS", "interleaved_layer_types",
    "TRANSFORMERS_READERS", "attention_from_transformers",
    "DECODER_CONFIGS", "DecoderAttention", "KVCache", "apply_rope", "apply_rope_interleaved", "attention_from_llama",
    "causal_mask_at", "expand_kv_heads", "interleaved_order", "kv_cache_bytes", "rope_cos_sin", "rope_frequencies",
    "rotate_half", "sinusoidal_positions", "sliding_window_mask", "get_language", "set_language",
    "GPT_CONFIGS", "GPTConfig", "HEAD_FORMERS", "DirectSplitHeads", "GroupedConvHeads", "ProjectionHeads",
    "WALKTHROUGH_SENTENCE", "WALKTHROUGH_TOKENS", "attention_parameter_count", "gpt_parameter_count",
    "make_head_former",
    "mask_from_allowed", "mask_from_blocked",
    "CausalAttention", "FusedMultiHeadAttention", "JOURNEY_TOKENS", "KERNELS", "MultiHeadAttention",
    "MultiHeadAttentionWrapper", "SelfAttention", "additive_mask", "attention_scores", "causal_mask",
    "combine_masks", "divisors", "embed_tokens", "explicit_attention", "fused_from_split", "get_device",
    "invert_mask", "journey_batch", "journey_inputs", "make_reproducible", "mask_from_key_padding",
    "mask_from_valid_lens", "masked_softmax", "merge_heads", "merge_heads_flat", "plot_heads", "scale_factor",
    "scale_scores", "sdpa_attention", "show", "show_table", "split_from_wrapper", "split_heads", "split_heads_flat",
    "stable_softmax", "tokenize", "torch_mha_from", "toy_sentence",
]
