"""What a trained head does, measured: one number per head and role, averaged over many sentences.

A heatmap invites stories ("this head looks at the verb"); a score makes the claim checkable. Each role below
is the mean attention weight that a head puts on one position relative to the query, averaged over every
*word* query of every sentence (the queries [CLS] and [SEP] are left out: they are not words), plus the
entropy of the head's rows:

    previous   weight on the token just before the query          w[t, t-1]
    next       weight on the token just after it                  w[t, t+1]
    self       weight on the query's own token                    w[t, t]
    cls        weight on [CLS], the first token                   w[t, 0]
    sep        weight on [SEP], the last real token               w[t, n-1]
    entropy    -Σ_s w[t, s] ln w[t, s]: 0 = all on one key, ln n = spread evenly over n tokens (nats)

The weights of one layer are ``(B, H, T, T)``; several layers stacked are ``(L, B, H, T, T)``. Sentences are
padded to ``T``; ``lengths`` ``(B,)`` gives each one's real length n (with [CLS] and [SEP]), so padding never
counts. A score of 1 means "always exactly that token"; a uniform head over n tokens scores 1/n on each role.

``coreference_scores`` measures the "it → animal" kind of head: the weight from a pronoun on the noun it refers
to, next to the weight on another noun of the sentence that it could have meant (``corpus.COREFERENCE``).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch

from ..language import Messages, N_
from ..validation import check_tensor

Tensor = torch.Tensor

ROLES = ("previous", "next", "self", "cls", "sep", "entropy")
ROLE_TITLES = Messages({  # read in the current language (mha_lib.set_language)
    "previous": N_("previous token"), "next": N_("next token"), "self": N_("own token"), "cls": "[CLS]",
    "sep": "[SEP]", "entropy": N_("entropy (nats)"),
})


def _check_weights_and_lengths(weights, lengths) -> tuple[Tensor, Tensor]:
    weights = check_tensor("weights", weights)
    if weights.dim() not in (4, 5) or weights.shape[-1] != weights.shape[-2]:
        raise ValueError("weights must have shape (B, H, T, T) for one layer or (L, B, H, T, T) for several, "
                         f"got {tuple(weights.shape)}")
    B, T = weights.shape[-4], weights.shape[-1]
    lengths = check_tensor("lengths", lengths)
    if lengths.dim() != 1 or lengths.shape[0] != B or lengths.dtype.is_floating_point:
        raise ValueError(f"lengths must be an integer tensor of shape ({B},), one real length per sentence, "
                         f"got {lengths.dtype} {tuple(lengths.shape)}")
    if (lengths < 3).any() or (lengths > T).any():
        raise ValueError(f"lengths must be between 3 ([CLS], one word, [SEP]) and T = {T}, got {lengths.tolist()}")
    return weights, lengths.to(weights.device)


def word_queries(lengths: Tensor, T: int) -> Tensor:
    """``(B, T)`` bool: True at the word tokens 1 .. n-2 of each sentence (not [CLS], [SEP] or padding)."""
    t = torch.arange(T, device=lengths.device)  # (T,)
    return (t >= 1) & (t <= lengths[:, None] - 2)  # (B, 1) against (T,) -> (B, T)


def per_query_scores(weights: Tensor, lengths: Tensor) -> dict[str, Tensor]:
    """Each role's value for every query: ``{role: (..., B, H, T)}`` (padding and [CLS]/[SEP] included)."""
    weights, lengths = _check_weights_and_lengths(weights, lengths)
    T = weights.shape[-1]
    zero = weights.new_zeros(weights.shape[:-2] + (1,))  # (..., B, H, 1): no previous/next at the edges
    previous = torch.cat([zero, weights.diagonal(offset=-1, dim1=-2, dim2=-1)], dim=-1)  # w[t, t-1], (..., T)
    following = torch.cat([weights.diagonal(offset=1, dim1=-2, dim2=-1), zero], dim=-1)  # w[t, t+1], (..., T)
    own = weights.diagonal(dim1=-2, dim2=-1)  # w[t, t], (..., B, H, T)
    cls = weights[..., 0]  # (..., B, H, T, T) -> (..., B, H, T)
    sep_index = (lengths - 1).view(-1, 1, 1, 1).expand(*weights.shape[:-1], 1)  # (B,) -> (..., B, H, T, 1)
    sep = weights.gather(-1, sep_index).squeeze(-1)  # w[t, n-1], (..., B, H, T)
    entropy = -(weights * weights.clamp_min(1e-12).log()).sum(dim=-1)  # 0 · ln 0 counts as 0
    return {"previous": previous, "next": following, "self": own, "cls": cls, "sep": sep, "entropy": entropy}


def role_scores(weights: Tensor, lengths: Tensor) -> dict[str, Tensor]:
    """Each role averaged over all word queries of all sentences: ``{role: (H,)}`` or ``{role: (L, H)}``."""
    weights, lengths = _check_weights_and_lengths(weights, lengths)
    queries = word_queries(lengths, weights.shape[-1]).to(weights.dtype)[:, None, :]  # (B, T) -> (B, 1, T)
    count = queries.sum() * 1  # word queries in the batch, the same for every head
    scores = {}
    for role, values in per_query_scores(weights, lengths).items():  # (..., B, H, T)
        scores[role] = (values * queries).sum(dim=(-3, -1)) / count  # (..., B, H, T) -> (..., H)
    return scores


class CoreferenceScores(NamedTuple):
    antecedent: Tensor  # (L, H) mean weight from the pronoun on the noun it refers to
    distractor: Tensor  # (L, H) mean weight from the pronoun on the other noun
    prefers_antecedent: Tensor  # (L, H) fraction of sentences where the antecedent gets more weight


def token_position(tokens: Sequence[str], word: str) -> int:
    """Where ``word`` is in a list of word pieces; it must occur exactly once (lower case, as the tokenizer)."""
    if not isinstance(word, str) or not word:
        raise TypeError(f"word must be a non-empty str, got {word!r}")
    hits = [i for i, token in enumerate(tokens) if token == word.lower()]
    if len(hits) != 1:
        raise ValueError(f"word must occur exactly once among the tokens, got {len(hits)} times {word!r} in "
                         f"{list(tokens)}")
    return hits[0]


def coreference_scores(weights: Tensor, tokens: Sequence[Sequence[str]], items) -> CoreferenceScores:
    """The weight from each pronoun on its antecedent and on the distractor, averaged over the sentences.

    ``weights`` ``(L, B, H, T, T)``: the attention of the sentences of ``items`` (``corpus.Coreference``), in
    that order; ``tokens`` their word pieces.
    """
    weights = check_tensor("weights", weights)
    if weights.dim() != 5:
        raise ValueError(f"weights must have shape (L, B, H, T, T), got {tuple(weights.shape)}")
    items = list(items)
    if len(items) != weights.shape[1] or len(tokens) != weights.shape[1]:
        raise ValueError(f"items and tokens must have one entry per sentence (B = {weights.shape[1]}), "
                         f"got {len(items)} items and {len(tokens)} token lists")
    on_antecedent, on_distractor = [], []
    for b, (item, toks) in enumerate(zip(items, tokens)):
        p = token_position(toks, item.pronoun)
        on_antecedent.append(weights[:, b, :, p, token_position(toks, item.antecedent)])  # (L, H)
        on_distractor.append(weights[:, b, :, p, token_position(toks, item.distractor)])  # (L, H)
    a, d = torch.stack(on_antecedent), torch.stack(on_distractor)  # (N, L, H) each
    return CoreferenceScores(a.mean(dim=0), d.mean(dim=0), (a > d).to(weights.dtype).mean(dim=0))


def top_heads(scores: Tensor, k: int = 3, *, largest: bool = True) -> list[tuple[int, int, float]]:
    """The ``k`` heads with the largest (or smallest) score: ``[(layer, head, value), ...]``, best first."""
    scores = check_tensor("scores", scores, ndim=2, layout="(L, H)")
    if not isinstance(k, int) or not 1 <= k <= scores.numel():
        raise ValueError(f"k must be an int between 1 and {scores.numel()}, got {k!r}")
    values, flat = scores.flatten().topk(k, largest=largest)
    H = scores.shape[1]
    return [(int(i) // H, int(i) % H, float(v)) for v, i in zip(values, flat)]


def role_table(scores: dict[str, Tensor], k: int = 3) -> list[str]:
    """Lines of text: for each role, its ``k`` strongest heads as ``L3 H7 0.91`` (layer, head from 0)."""
    lines = []
    for role, values in scores.items():
        best = top_heads(values, k, largest=role != "entropy")  # low entropy = the most focused heads
        title = ROLE_TITLES.get(role, role)
        lines.append(f"{title:>16}: " + "   ".join(f"L{l} H{h} {v:.2f}" for l, h, v in best))
    return lines


__all__ = [
    "CoreferenceScores", "ROLES", "ROLE_TITLES", "coreference_scores", "per_query_scores", "role_scores",
    "role_table", "token_position", "top_heads", "word_queries",
]
