"""The Chinese message catalog: complete, faithful to its placeholders, compiled, in the glossary's terms, and
used by the checkers and the figures when the language is zh-CN.

The catalog is ``mha_lib/locale/zh_CN/LC_MESSAGES/mha_lib.po`` (and its ``.mo``); ``make translations`` (or
``python tests/translations.py extract``) brings it up to date with the source. Each check has a test of the test
that feeds it a broken catalog, so that a check that could never fail is noticed.
"""

import re
from pathlib import Path

import pytest
import torch
from babel.messages.catalog import Catalog

import translations
from mha_lib.language import get_language, set_language

GLOSSARY = translations.NOTEBOOKS / "zh-CN" / "术语表.md"
LOCALE = "zh_CN"
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(autouse=True)
def _restore_language():
    before = get_language()
    yield
    set_language(before)


@pytest.fixture(scope="module")
def source():
    """Every message extracted from mha_lib's source: (msgid, msgctxt)."""
    return {(m.id, m.context) for m in translations.extract_messages() if m.id}


@pytest.fixture(scope="module")
def catalog():
    return translations.read_po(translations.po_path(LOCALE), LOCALE)


def _listed(problems: dict[str, list[str]], kinds) -> str:
    return "\n".join(f"{kind}: {item!r}" for kind in kinds for item in problems[kind])


# --- completeness -------------------------------------------------------------------------------------------------


def test_every_message_of_the_source_is_translated(source, catalog):
    """Fails with the list of messages to translate: run `make translations`, then fill their msgstr."""
    problems = translations.catalog_problems(source, catalog)
    kinds = ("missing", "untranslated", "fuzzy", "obsolete")
    assert not any(problems[k] for k in kinds), "the zh_CN catalog is not complete:\n" + _listed(problems, kinds)


def test_the_catalog_is_not_empty(source, catalog):
    assert len(source) > 300  # the wings' messages are marked (a broken extractor would find none)
    assert len([m for m in catalog if m.id]) == len(source)


def test_placeholders_in_every_msgstr_equal_those_of_its_msgid(source, catalog):
    problems = translations.catalog_problems(source, catalog)
    assert not problems["placeholders"], "msgstr placeholders differ:\n" + _listed(problems, ["placeholders"])


def _toy_catalog(entries) -> Catalog:
    toy = Catalog(locale=LOCALE)
    for msgid, msgstr, flags in entries:
        toy.add(msgid, msgstr, flags=flags)
    return toy


def test_of_the_tests_each_kind_of_gap_is_listed():
    toy = _toy_catalog([("done {x}", "完成 {x}", ()), ("empty", "", ()), ("guess", "猜测", ("fuzzy",)),
                        ("gone", "已删除", ()), ("wrong {field}", "错了 {feld}", ()),
                        (("{n} head", "{n} heads"), ("{n} 个头",), ())])
    source = {(m, None) for m in ("done {x}", "empty", "guess", "wrong {field}", "new message",
                                  ("{n} head", "{n} heads"))}
    problems = translations.catalog_problems(source, toy)
    assert problems == {"missing": ["new message"], "untranslated": ["empty"], "fuzzy": ["guess"],
                        "obsolete": ["gone"], "placeholders": ["wrong {field}"]}
    assert "missing: 'new message'" in _listed(problems, ["missing"])  # the failure message names them


def test_placeholders_reads_format_fields():
    assert translations.placeholders("loss {loss:.3f} at {step}, {{literal}}") == {"loss", "step"}
    assert translations.placeholders("no fields") == set()


# --- the compiled catalog ----------------------------------------------------------------------------------------


def test_the_committed_mo_equals_a_fresh_compile_of_the_po():
    committed = translations.mo_path(LOCALE).read_bytes()
    assert committed == translations.compile_catalog(LOCALE), (
        "mha_lib.mo is out of date: run `python tests/translations.py compile` (make translations)")


def test_the_catalogs_ship_in_the_wheel():
    text = (translations.ROOT / "pyproject.toml").read_text(encoding="utf-8")
    for pattern in ('"locale/*/LC_MESSAGES/*.mo"', '"locale/*/LC_MESSAGES/*.po"'):
        assert pattern in text


# --- the glossary ------------------------------------------------------------------------------------------------


def _msgstrs(catalog) -> list[str]:
    out = []
    for message in catalog:
        if message.id:
            out += list(message.string) if isinstance(message.string, tuple) else [message.string]
    return out


def test_the_glossary_has_one_term_per_concept():
    rows = translations.glossary(GLOSSARY.read_text(encoding="utf-8"))
    terms = [row["term"] for row in rows]
    assert len(rows) >= 30 and len(set(terms)) == len(terms)
    for required in ("词元", "查询", "键", "值", "注意力权重", "注意力分数", "多头注意力", "头", "掩码", "因果掩码",
                     "填充掩码", "缩放点积注意力", "自注意力", "交叉注意力", "位置编码", "嵌入", "投影", "输出投影",
                     "残差", "批量", "维度", "张量", "softmax", "分组查询注意力", "多查询注意力", "键值缓存",
                     "旋转位置编码", "滑动窗口注意力", "多头潜在注意力", "诱导头", "消融"):
        assert required in terms, required
    assert all(row["english"] and row["definition"] for row in rows)
    used_as_terms = set(terms)
    for row in rows:  # a discouraged word is never another concept's term
        assert not used_as_terms & set(row["discouraged"]), row


def test_no_msgstr_uses_a_discouraged_synonym(catalog):
    rows = translations.glossary(GLOSSARY.read_text(encoding="utf-8"))
    found = translations.discouraged_uses(_msgstrs(catalog), rows)
    assert not found, "use the glossary's terms:\n" + "\n".join(found)


def test_of_the_test_a_discouraged_synonym_is_found():
    rows = translations.glossary("| 术语 | English | 定义 | 不要用 |\n|---|---|---|---|\n| 词元 | token | 最小单位 | 令牌、标记 |\n")
    assert rows == [{"term": "词元", "english": "token", "definition": "最小单位", "discouraged": ["令牌", "标记"]}]
    assert translations.discouraged_uses(["每个令牌一行", "每个词元一行"], rows) == ["令牌 (use 词元): 每个令牌一行"]


# --- the wings speak Chinese -------------------------------------------------------------------------------------


def _right_weights(q, k):
    return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)


def _unscaled_weights(q, k):
    return torch.softmax(q @ k.transpose(-2, -1), dim=-1)


def test_a_checker_speaks_chinese_and_switches_back():
    from mha_lib.exercises.ch01_single_head import NO_SCALE, check_attention_weights

    set_language("zh-CN")
    right, wrong = check_attention_weights(_right_weights), check_attention_weights(_unscaled_weights)
    assert right and str(right) == "✅ attention_weights：正确：每个查询一行权重，而且每一行之和都是 1。"
    assert not wrong and CJK.search(wrong.message) and "√Dh" in wrong.message
    set_language("en")
    assert str(check_attention_weights(_right_weights)) == (
        "✅ attention_weights: correct: one row of weights per query, and every row sums to 1.")
    assert check_attention_weights(_unscaled_weights).message == NO_SCALE


def test_shared_checker_texts_speak_chinese():
    from mha_lib.exercises import compare

    set_language("zh-CN")
    verdict = compare("demo", torch.zeros(2, 3), torch.zeros(3, 2))
    assert verdict.message == "形状不对：得到 (2, 3)，应为 (3, 2)。"


def test_plot_heads_labels_speak_chinese_and_switch_back():
    from mha_lib.display.plotting import plot_heads

    weights = torch.softmax(torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(0)), dim=-1)
    set_language("zh-CN")
    fig = plot_heads(weights, list("abcd"))
    assert fig.axes[0].get_ylabel() == "查询（行）" and fig.axes[0].get_title() == "头 0"
    assert fig.axes[-1].get_ylabel() == "注意力权重"  # the colour bar
    set_language("en")
    fig = plot_heads(weights, list("abcd"))
    assert fig.axes[0].get_ylabel() == "query (row attends …)" and fig.axes[0].get_title() == "head 0"


def test_the_explorers_frame_and_a_role_title_follow_the_language():
    from mha_lib.display import render
    from mha_lib.trained.head_roles import ROLE_TITLES

    set_language("zh-CN")
    assert ROLE_TITLES["previous"] == "前一个词元"
    chinese = render.layout(2, ("a", "b"), ("a", "b"), "注意力权重", (render.NAN_LEGEND,))
    set_language("en")
    assert ROLE_TITLES["previous"] == "previous token"
    english = render.layout(2, ("a", "b"), ("a", "b"), "注意力权重", (render.NAN_LEGEND,))
    assert chinese.frame.tobytes() != english.frame.tobytes()  # "头 0" and "NaN（溢出）" drawn, not "head 0"


def test_static_widget_copies_are_written_in_the_notebooks_language():
    from mha_lib.display import static_widgets as sw

    assert sw.notebook_language({"cells": []}, Path("notebooks/zh-CN/01_single_head_attention.ipynb")) == "zh-CN"
    assert sw.notebook_language({"cells": []}, Path("notebooks/01_single_head_attention.ipynb")) == "en"
    assert sw.notebook_language({"cells": [], "metadata": {"mha_lib": {"language": "zh-CN"}}}) == "zh-CN"
    output = {"output_type": "display_data", "data": {sw.WIDGET_VIEW: {"model_id": "m"}}}
    chinese = sw.static_outputs(output, {}, "zh-CN")[0]["data"]["text/plain"]
    assert chinese.startswith("▶ 运行这个单元格") and sw.static_outputs(output, {})[0]["data"]["text/plain"] == (
        sw.NOTE_NO_PICTURE)
