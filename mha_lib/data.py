"""Small, fixed inputs shared by the notebooks and the tests."""

from __future__ import annotations

import re
import unicodedata
import zlib

import torch

from .validation import check_positive_int, check_seed

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
_CJK_CHAR = re.compile(rf"[{_CJK}]")
_WORD_CHAR = re.compile(r"\w")

_ZWJ = "\u200d"  # zero-width joiner: glues two emoji into one picture (👩‍💻)


def _extends(ch: str) -> bool:
    """Does ``ch`` belong to the character before it (Unicode's grapheme "Extend"/"SpacingMark", simplified)?"""
    code = ord(ch)
    return (
        unicodedata.category(ch) in ("Mn", "Me", "Mc")  # combining marks: the accent of e + ◌́ = é
        or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF  # variation selectors: ❤ + VS16 = ❤️
        or 0x1F3FB <= code <= 0x1F3FF  # skin-tone modifiers: 👍 + 🏽
        or 0xE0020 <= code <= 0xE007F  # tag characters (the flags of England, Scotland, Wales)
        or ch == _ZWJ
    )


def _is_regional_indicator(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF  # two of them make a flag: 🇫 + 🇷 = 🇫🇷


def graphemes(text: str) -> list[str]:
    """``text`` cut into user-perceived characters: a letter with its combining accents, an emoji with its
    skin tone, variation selector and zero-width-joined partners (👩🏽‍💻 is one), a flag's two letters.

    A pure-Python simplification of Unicode's extended grapheme clusters (UAX #29) that covers those cases; it
    does not merge Hangul jamo sequences (precomposed Hangul syllables are single characters anyway).
    """
    clusters: list[str] = []
    joined = False  # the previous character was a ZWJ: the next one joins the cluster
    for ch in text:
        if clusters and ((joined and not ch.isspace()) or _extends(ch)):
            clusters[-1] += ch
        elif (clusters and _is_regional_indicator(ch) and len(clusters[-1]) == 1
              and _is_regional_indicator(clusters[-1])):
            clusters[-1] += ch  # the second letter of a flag
        else:
            clusters.append(ch)
        joined = ch == _ZWJ and len(clusters[-1]) > 1  # a ZWJ that starts a cluster joins nothing
    return clusters


def tokenize(text: str) -> list[str]:
    """Words, punctuation marks, symbols and single CJK characters, in order.

    ``"Hi, you."`` -> ``["Hi", ",", "you", "."]``;  ``"me.郭同学AI"`` -> ``["me", ".", "郭", "同", "学", "AI"]``.
    Text is cut into user-perceived characters first (see ``graphemes``), so an accent stays on its letter
    (``"café"`` is one word even when the é is e + U+0301) and an emoji stays whole: ``"I ❤️ 👩🏽‍💻"`` ->
    ``["I", "❤️", "👩🏽‍💻"]``, never a blank token of a lone joiner or selector.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    tokens: list[str] = []
    in_word = False  # the last token is a word still open to more letters
    for cluster in graphemes(text):
        base = cluster[0]
        if base.isspace() or base == _ZWJ:  # a stray joiner or space separates, and is no token itself
            in_word = False
        elif _CJK_CHAR.match(base):
            tokens.append(cluster)
            in_word = False
        elif _WORD_CHAR.match(base):
            if in_word:
                tokens[-1] += cluster
            else:
                tokens.append(cluster)
                in_word = True
        elif _extends(base):  # a combining mark with nothing before it: keep it, as its own symbol
            tokens.append(cluster)
            in_word = False
        else:
            tokens.append(cluster)
            in_word = False
    if not tokens:
        raise ValueError(f"text must contain at least one word or symbol, got {text!r}")
    return tokens


def embed_tokens(tokens, d_model: int, *, seed: int = 0) -> torch.Tensor:
    """A fixed random embedding per distinct token, shape ``(len(tokens), d_model)``.

    Stands in for a trained embedding table: the same token always gets the same vector (for a given
    ``seed``), drawn on the CPU from N(0, 1) so that every machine gets the same numbers.
    """
    d_model = check_positive_int("d_model", d_model)
    seed = check_seed("seed", seed)
    if isinstance(tokens, str):  # a str is iterable too: it would be embedded letter by letter
        raise TypeError(f"tokens must be a list of str, got the str {tokens!r}; split it first with tokenize(text)")
    if isinstance(tokens, torch.Tensor) or not hasattr(tokens, "__iter__"):
        raise TypeError(f"tokens must be a list of str, got {type(tokens).__name__}")
    rows = []
    for i, token in enumerate(tokens):
        if not isinstance(token, str):
            raise TypeError(f"tokens must be a list of str, got {type(token).__name__} {token!r} at position {i}")
        # reduced mod 2**64: manual_seed takes 64 bits (seed 0 and the old seeds give the numbers they always gave)
        generator = torch.Generator().manual_seed(
            (seed * 1_000_003 + zlib.crc32(token.encode("utf-8", "surrogatepass"))) % 2**64)
        rows.append(torch.randn(d_model, generator=generator))
    if not rows:
        raise ValueError("tokens must not be empty")
    return torch.stack(rows)  # T × (d_model,) -> (T, d_model)


def toy_sentence(text: str = "Your journey starts with one step", d_model: int = 16, *, seed: int = 0):
    """``(tokens, embeddings)`` for a sentence: its token labels and a ``(T, d_model)`` embedding."""
    tokens = tokenize(text)
    return tokens, embed_tokens(tokens, d_model, seed=seed)


#: The sentence of the GPT-2-sized walkthrough (chapter 8): "LLM with me. Classmate Guo loves AI and likes
#: games".
WALKTHROUGH_SENTENCE = "LLM with me.郭同学热爱AI喜欢游戏"

#: Its 16 tokens, an *illustrative* split that gives the seed's sequence length of 16: "LLM" cut into "LL" + "M"
#: as GPT-2's tokenizer does, one token per Chinese character, and GPT-2's end-of-text marker as the 16th.
#: (GPT-2's real byte-level BPE often cuts a Chinese character into two or three byte pieces; its " with" and " me"
#: also carry the space in front, dropped here for readable labels.)
WALKTHROUGH_TOKENS = (
    "LL", "M", "with", "me", ".", "郭", "同", "学", "热", "爱", "AI", "喜", "欢", "游", "戏", "<|endoftext|>",
)
