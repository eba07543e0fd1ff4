"""mha_lib.language: the language setting, its errors, the English fallback and the shipped catalog."""

import gettext
from pathlib import Path

import pytest

import mha_lib
from mha_lib import language
from mha_lib.language import get_language, set_language

# a message every catalog has (the checkers' plain "correct.") and its Chinese
KNOWN = "correct."
KNOWN_ZH = "正确。"


@pytest.fixture(autouse=True)
def _restore_language():
    before = get_language()
    yield
    set_language(before)


def test_english_is_the_default_and_set_language_switches_at_call_time():
    assert get_language() == "en"
    assert language.gettext(KNOWN) == KNOWN
    set_language("zh-CN")
    assert get_language() == "zh-CN"
    assert language.gettext(KNOWN) == KNOWN_ZH  # read when called: no re-import needed
    set_language("en")
    assert language.gettext(KNOWN) == KNOWN


def test_zh_CN_with_an_underscore_is_accepted():
    set_language("zh_CN")
    assert get_language() == "zh-CN"


@pytest.mark.parametrize("code", ["fr", "zh", "ZH-CN", "", None, 1, "zh-TW"])
def test_bad_codes_name_the_argument_what_it_got_and_the_choices(code):
    with pytest.raises(ValueError) as error:
        set_language(code)
    assert str(error.value) == f"set_language(code): code must be one of ['en', 'zh-CN'], got {code!r}"
    assert get_language() == "en"  # unchanged


def test_a_message_missing_from_the_catalog_prints_in_english():
    set_language("zh-CN")
    missing = "a message no catalog has {x}"
    assert language.gettext(missing) == missing
    assert language.ngettext("one {n} thing", "{n} things", 3) == "{n} things"
    assert language.N_(missing) == missing  # a marker, never a translation


def test_plural_forms_follow_the_number():
    assert language.ngettext("{n} item", "{n} items", 1) == "{n} item"
    assert language.ngettext("{n} item", "{n} items", 2) == "{n} items"


def installed_catalog(locale_dir: Path, code: str = "zh-CN"):
    """The catalog gettext finds for ``code`` under ``locale_dir`` (None when there is none)."""
    return gettext.find(language.DOMAIN, str(locale_dir), languages=[code.replace("-", "_")])


def test_the_mo_is_loaded_from_the_installed_package():
    package = Path(mha_lib.__file__).resolve().parent
    assert language.LOCALE_DIR == package / "locale"
    found = installed_catalog(language.LOCALE_DIR)
    assert found is not None and Path(found) == package / "locale" / "zh_CN" / "LC_MESSAGES" / "mha_lib.mo"
    catalog = language.translations("zh-CN")
    assert isinstance(catalog, gettext.GNUTranslations)  # a real catalog, not the silent English fallback
    assert catalog.gettext(KNOWN) == KNOWN_ZH
    assert catalog.info()["language"] == "zh_CN"


def test_of_the_test_a_missing_mo_falls_back_to_english(tmp_path):
    """Where no .mo is found (a wheel without its catalogs), gettext gives English without an error: the check
    above is what notices it."""
    assert installed_catalog(tmp_path) is None
    fallback = gettext.translation(language.DOMAIN, str(tmp_path), languages=["zh_CN"], fallback=True)
    assert not isinstance(fallback, gettext.GNUTranslations)
    assert fallback.gettext(KNOWN) == KNOWN


def test_a_listener_follows_the_language():
    from mha_lib import language

    heard = []
    language.on_language_change(heard.append)
    try:
        language.set_language("zh-CN")
        language.set_language("en")
    finally:
        language._listeners.remove(heard.append)
    assert heard == ["en", "zh-CN", "en"]  # called once at once, then after each set_language


def test_chinese_switches_matplotlib_to_a_cjk_fallback_font():
    import matplotlib

    import mha_lib
    import mha_lib.display  # noqa: F401  (registers the display wing's listener)

    with matplotlib.rc_context({"font.family": ["sans-serif"]}):  # no CJK font yet
        mha_lib.set_language("zh-CN")
        try:
            assert "Noto Sans SC" in matplotlib.rcParams["font.family"]
        finally:
            mha_lib.set_language("en")
