"""The KV cache: one layer's keys and values of the tokens already seen, kept for the next step (chapter 12).

When a model generates, token ``t`` needs the keys and values of tokens ``0..t``. Without a cache each step
projects the whole prefix again; with one, each step projects only the new token and appends its key and value.
What it does *not* save: the new query still reads every cached key (the scores of one step grow with t).

    cache = KVCache()
    for x_t in chunks:                      # token by token, or chunks of any size
        out = layer(x_t, kv_cache=cache)    # the layer appends the chunk's keys and values, then attends
    cache.length, cache.nbytes              # tokens held, bytes held

The cache holds whatever tensors its layer appends, every one with the tokens along dimension ``-2``: keys and
values after RoPE with ``num_kv_heads`` heads only (``MultiHeadAttention``), or the compressed latent and the
shared rotary key (``MultiHeadLatentAttention``, chapter 14); ``nbytes`` adds them all up. A layer with a
sliding window keeps only the last ``window - 1`` tokens: what the next query can still see besides itself.
"""

from __future__ import annotations

import weakref

import torch

from .validation import check_int

Tensor = torch.Tensor


class KVCache:
    """One layer's cache. Give each layer its own: a cache remembers the layer that filled it.

    ``seen``    tokens fed so far: the position of the next token
    ``length``  tokens held (``seen``, or fewer once a sliding window has dropped the oldest)
    ``start``   position of the oldest token held (``seen - length``)
    ``nbytes``  bytes held by all its tensors
    """

    def __init__(self):
        self.tensors: tuple[Tensor, ...] = ()
        self.seen = 0
        # a weak reference to the layer that first used it, not its id(): Python reuses the id of a freed object,
        # so a layer built anew at every step could take the place of the freed one and fill the same cache
        self._owner: weakref.ref | None = None

    @property
    def length(self) -> int:
        return self.tensors[0].shape[-2] if self.tensors else 0

    @property
    def start(self) -> int:
        return self.seen - self.length

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)

    @property
    def batch_size(self) -> int | None:
        return self.tensors[0].shape[0] if self.tensors else None

    def positions(self, device=None) -> Tensor:
        """The positions of the tokens held, ``start .. seen - 1``."""
        return torch.arange(self.start, self.seen, device=device)

    def claim(self, layer) -> None:
        """Called by a layer before it reads or writes: one cache, one layer, for as long as the cache lives."""
        if self._owner is None:
            self._owner = weakref.ref(layer)
            return
        owner = self._owner()
        if owner is None:
            raise ValueError(
                "kv_cache belongs to a layer that no longer exists: a cache stays tied to the layer it was first "
                "used with, and that layer was freed (was the layer built anew for this step?). Build the layers "
                "once and give each its own KVCache() (a model keeps one per layer, e.g. caches = [KVCache() for "
                "_ in layers])"
            )
        if owner is not layer:
            raise ValueError(
                "kv_cache already holds another layer's keys and values: give each layer its own KVCache() "
                "(a model keeps one per layer, e.g. caches = [KVCache() for _ in layers])"
            )

    def start_chunk(self, layer, batch_size: int, tokens: int, context_length: int) -> int:
        """Called by a layer before a chunk of ``tokens`` tokens: claims the cache, checks that the chunk continues
        the same batch and that its positions fit in ``context_length``; returns the chunk's first position."""
        self.claim(layer)
        if self.batch_size is not None and self.batch_size != batch_size:
            raise ValueError(
                f"kv_cache holds a batch of {self.batch_size} sequences but x has {batch_size}: a cache "
                f"follows the same sequences from step to step; start a new KVCache() for a new batch"
            )
        if self.seen + tokens > context_length:
            raise ValueError(
                f"kv_cache has seen {self.seen} tokens and x brings {tokens} more: "
                f"{self.seen + tokens} positions exceed context_length = {context_length}; "
                f"build the layer with a larger context_length or start a new KVCache()"
            )
        return self.seen

    def append(self, *chunk: Tensor) -> tuple[Tensor, ...]:
        """Add one chunk's tensors (tokens along dim -2) and return everything held, the chunk included."""
        if not chunk:
            raise ValueError("append needs at least one tensor (e.g. the chunk's keys and values)")
        for i, t in enumerate(chunk):
            if not isinstance(t, Tensor) or t.dim() < 2:
                raise TypeError(f"chunk[{i}] must be a tensor with tokens along dim -2, got {_describe(t)}")
        n = chunk[0].shape[-2]
        if any(t.shape[-2] != n for t in chunk):
            raise ValueError(f"every tensor of a chunk must hold the same number of tokens (dim -2), got "
                             f"{[tuple(t.shape) for t in chunk]}")
        if self.tensors:
            if len(chunk) != len(self.tensors):
                raise ValueError(f"this cache holds {len(self.tensors)} tensors per token, got {len(chunk)}")
            for i, (held, new) in enumerate(zip(self.tensors, chunk)):
                if held.shape[0] != new.shape[0]:
                    raise ValueError(
                        f"kv_cache holds a batch of {held.shape[0]} sequences but this chunk has {new.shape[0]}: "
                        f"a cache follows the same sequences from step to step; start a new KVCache() for a new "
                        f"batch"
                    )
                if held.shape[:-2] != new.shape[:-2] or held.shape[-1] != new.shape[-1]:
                    raise ValueError(f"chunk[{i}] of shape {tuple(new.shape)} does not fit the cached "
                                     f"{tuple(held.shape)} (only dim -2, the tokens, may differ)")
                if held.dtype != new.dtype or held.device != new.device:
                    raise ValueError(f"chunk[{i}] is {new.dtype} on {new.device} but the cache holds "
                                     f"{held.dtype} on {held.device}")
            self.tensors = tuple(torch.cat([held, new], dim=-2) for held, new in zip(self.tensors, chunk))
        else:
            self.tensors = tuple(chunk)
        self.seen += n
        return self.tensors

    def keep_last(self, tokens: int) -> None:
        """Drop all but the newest ``tokens`` tokens (a sliding window's cache)."""
        tokens = check_int("tokens", tokens, low=0)
        if self.length > tokens:
            # a copy, not a view: a view would keep the whole old tensor alive and nbytes would lie
            self.tensors = tuple(t[..., self.length - tokens:, :].clone() for t in self.tensors)

    def clear(self) -> None:
        """Forget everything (a new sequence); the cache stays tied to its layer."""
        self.tensors, self.seen = (), 0

    def __repr__(self) -> str:
        shapes = ", ".join(str(tuple(t.shape)) for t in self.tensors)
        return f"KVCache(seen={self.seen}, length={self.length}, nbytes={self.nbytes:,}, tensors=[{shapes}])"


def _describe(value) -> str:
    if isinstance(value, Tensor):
        return f"a {value.dim()}-D tensor"
    return type(value).__name__


__all__ = ["KVCache"]
