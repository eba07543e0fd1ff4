"""Today's decoders (chapters 12 to 14): the pictures, widgets and reference models around the core's grouped-query
attention, KV cache, rotary positions, sliding windows, tiled attention and latent attention (those live in the
core: ``modules.MultiHeadAttention``, ``cache.KVCache``, ``positions``, ``masks``, ``functional.flash_attention``,
``latent.MultiHeadLatentAttention``).

    llama.py     a tiny transformers ``LlamaAttention`` built offline (random weights) and called as Llama calls it
    deepseek.py  a tiny transformers ``DeepseekV3Attention`` built offline, called as DeepSeek-V3 calls it
    sharing.py   chapter 12: heads grouped by the key/value head they share, the cache filling up, the G slider
    rotary.py    chapter 13: rotations, frequencies, the offset widget, windows and how far information travels,
                 and chapter 11's model with rotary positions (its optional section)
    scale.py     chapter 14: the online softmax walked block by block, the tile grid (causal tiles skipped), the
                 memory wall measured, and MHA / GQA / MQA / MLA compared (cache, parameters, FLOPs)

Imported on use: ``import mha_lib`` never loads transformers or matplotlib.
"""
