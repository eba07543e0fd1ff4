"""Today's decoders (chapters 12 and 13): the pictures, widgets and reference models around the core's
grouped-query attention, KV cache, rotary positions and sliding windows (those live in the core:
``modules.MultiHeadAttention``, ``cache.KVCache``, ``positions``, ``masks``).

    llama.py     a tiny transformers ``LlamaAttention`` built offline (random weights) and called as Llama calls it
    sharing.py   chapter 12: heads grouped by the key/value head they share, the cache filling up, the G slider
    rotary.py    chapter 13: rotations, frequencies, the offset widget, windows and how far information travels,
                 and chapter 11's model with rotary positions (its optional section)

Imported on use: ``import mha_lib`` never loads transformers or matplotlib.
"""
