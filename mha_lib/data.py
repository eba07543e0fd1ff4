"""Small, fixed inputs shared by the notebooks and the tests."""

from __future__ import annotations

import re
import zlib

import torch

from .validation import check_positive_int

#: The six tokens of the running example of *Build a Large Language Model (From Scratch)*, chapter 3.
JOURNEY_TOKENS = ("Your", "journey", "starts", "with", "one", "step")

# Its hand-picked 3-D embeddings, one row per token (the book prints every result from these).
_JOURNEY_EMBEDDINGS = (
    (0.43, 0.15, 0.89),
    (0.55, 0.87, 0.66),
    (0.57, 0.85, 0.64),
    (0.22, 0.58, 0.33),
    (0.77, 0.25, 0.10),
    (0.05, 0.80, 0.55),
)


def journey_inputs() -> torch.Tensor:
    """The book's inputs, shape ``(6, 3)``: "Your journey starts with one step"."""
    return torch.tensor(_JOURNEY_EMBEDDINGS)


def journey_batch(batch_size: int = 2) -> torch.Tensor:
    """``batch_size`` copies of ``journey_inputs()`` stacked, shape ``(batch_size, 6, 3)``, as in the book."""
    batch_size = check_positive_int("batch_size", batch_size)
    return journey_inputs().expand(batch_size, -1, -1).clone()  # (6, 3) -> (B, 6, 3)


# One token per CJK character (Chinese has no spaces between words; a run of characters is not one word)
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Words, punctuation marks and single CJK characters, in order.

    ``"Hi, you."`` -> ``["Hi", ",", "you", "."]``;  ``"me.郭同学AI"`` -> ``["me", ".", "郭", "同", "学", "AI"]``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    tokens = _TOKEN.findall(text)
    if not tokens:
        raise ValueError(f"text must contain at least one word or symbol, got {text!r}")
    return tokens


def embed_tokens(tokens, d_model: int, *, seed: int = 0) -> torch.Tensor:
    """A fixed random embedding per distinct token, shape ``(len(tokens), d_model)``.

    Stands in for a trained embedding table: the same token always gets the same vector (for a given
    ``seed``), drawn on the CPU from N(0, 1) so that every machine gets the same numbers.
    """
    d_model = check_positive_int("d_model", d_model)
    if isinstance(tokens, str):  # a str is iterable too: it would be embedded letter by letter
        raise TypeError(f"tokens must be a list of str, got the str {tokens!r}; split it first with tokenize(text)")
    rows = []
    for i, token in enumerate(tokens):
        if not isinstance(token, str):
            raise TypeError(f"tokens must be a list of str, got {type(token).__name__} {token!r} at position {i}")
        generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(token.encode("utf-8")))
        rows.append(torch.randn(d_model, generator=generator))
    if not rows:
        raise ValueError("tokens must not be empty")
    return torch.stack(rows)  # T × (d_model,) -> (T, d_model)


def toy_sentence(text: str = "Your journey starts with one step", d_model: int = 16, *, seed: int = 0):
    """``(tokens, embeddings)`` for a sentence: its token labels and a ``(T, d_model)`` embedding."""
    tokens = tokenize(text)
    return tokens, embed_tokens(tokens, d_model, seed=seed)


#: The sentence of seed 002's GPT-2-sized walkthrough (chapter 8): "LLM with me. Classmate Guo loves AI and likes
#: games".
SEED002_SENTENCE = "LLM with me.郭同学热爱AI喜欢游戏"

#: Its 16 tokens, an *illustrative* split that gives the seed's sequence length of 16: "LLM" cut into "LL" + "M"
#: as GPT-2's tokenizer does, one token per Chinese character, and GPT-2's end-of-text marker as the 16th.
#: (GPT-2's real byte-level BPE often cuts a Chinese character into two or three byte pieces; its " with" and " me"
#: also carry the space in front, dropped here for readable labels.)
SEED002_TOKENS = (
    "LL", "M", "with", "me", ".", "郭", "同", "学", "热", "爱", "AI", "喜", "欢", "游", "戏", "<|endoftext|>",
)
