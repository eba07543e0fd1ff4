"""Today's decoders (chapters 12 to 17): the pictures, widgets and reference models around the core's grouped-query
attention, KV cache, rotary positions, sliding windows, tiled, latent, linear and compressed attention (those live in
the core: ``modules.MultiHeadAttention``, ``cache.KVCache``, ``positions``, ``masks``, ``functional.flash_attention``,
``latent.MultiHeadLatentAttention``, ``linear``, ``compressed.CompressedAttention``).

    llama.py     a tiny transformers ``LlamaAttention`` built offline (random weights) and called as Llama calls it
    deepseek.py  a tiny transformers ``DeepseekV3Attention`` built offline, called as DeepSeek-V3 calls it
    sharing.py   chapter 12: heads grouped by the key/value head they share, the cache filling up, the G slider
    rotary.py    chapter 13: rotations, frequencies, the offset widget, windows and how far information travels,
                 and chapter 11's model with rotary positions (its optional section)
    scale.py     chapter 14: the online softmax walked block by block, the tile grid (causal tiles skipped), the
                 memory wall measured, and MHA / GQA / MQA / MLA compared (cache, parameters, FLOPs)
    families.py  chapter 15: tiny transformers attention of ten families (Qwen3, OLMo 2/3, Gemma 2/3, gpt-oss,
                 Qwen3-Next, Llama 4, ...) built offline and called with their own rotary and mask, for
                 ``mha_lib.attention_from_transformers``
    smollm2.py   chapter 15: SmolLM2-135M-Instruct offline (its GGUF converted once to a cached float32 copy),
                 the first token's attention mass, StreamingLLM's experiment
    attention_controls.py  chapter 15's figures and widgets (the soft-cap, the first token's mass, partial RoPE)
                 and chapter 11's model trained plain, with sinks and with a gate
    linear_state.py  chapter 16: linear attention's implicit weights, the state filling up, the delta rule
                 stepped, chunked and recurrent forms (picture, timing), hybrids' memory, a tiny transformers
                 Qwen3NextGatedDeltaNet, and chapter 11's model trained with four mixers (the recall race)
    sparse_figures.py  chapter 17: how much weight the top k keys hold (SmolLM2), the lightning indexer's cost,
                 which keys each query reads (figure and widget), masked vs gathered measured in fresh
                 processes, a tiny transformers DeepseekV32Attention
    deepseek_v4.py   chapter 17 (optional): tiny transformers DeepseekV4Attention layers (sliding, CSA, HCA) built
                 offline and called as DeepSeek-V4 calls them, for ``compressed.CompressedAttention``

Imported on use: ``import mha_lib`` never loads transformers or matplotlib.
"""
