"""Chapter 10: the heads of a real trained model (all-MiniLM-L6-v2), read with mha_lib's own layers.

    pretrained.py   the model loaded offline; BERT attention -> ``MultiHeadAttention``; the encoder on it; ablation
    head_roles.py   per-head role scores (previous/next/own token, [CLS], [SEP], entropy, coreference)
    corpus.py       the chapter's 50 sentences
    explorer.py     the real-head explorer;  plots.py  the chapter's figures

Nothing is imported here, and ``transformers`` only by the functions of ``pretrained`` that need it.
"""
