"""The language of everything ``mha_lib`` says to a student: English (``"en"``, the default) or Simplified
Chinese (``"zh-CN"``).

A notebook's set-up cell selects it (``mha_lib.set_language("zh-CN")``); the English chapters select ``"en"`` the
same way. The words live in standard gettext catalogs (domain ``mha_lib``), one per language, shipped inside the
package: ``mha_lib/locale/<ll_CC>/LC_MESSAGES/mha_lib.po`` and its compiled ``.mo`` (``tests/translations.py``
extracts, updates and compiles them). A message missing from a catalog is printed in English.

The wings translate at call time, so ``set_language`` works after ``import mha_lib``::

    from ..language import gettext as _, N_

    print(_("got {got}, expected {expected}").format(got=..., expected=...))
    NO_SCALE = N_("you forgot the scaling")      # a message named once at import, translated where it is shown

Only what a student reads is translated; exceptions raised for bad input stay in English (that is what people
search for).
"""

from __future__ import annotations

import gettext as _gettext
from functools import lru_cache
from pathlib import Path
from typing import Callable

DOMAIN = "mha_lib"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
LANGUAGES = ("en", "zh-CN")  # the codes set_language accepts ("zh_CN" is read as "zh-CN")
_ALIASES = {"en": "en", "zh-CN": "zh-CN", "zh_CN": "zh-CN"}

_current = "en"
_listeners: list[Callable[[str], None]] = []  # called with the new code by set_language (display/: CJK fonts)


def set_language(code: str) -> None:
    """Select the language of the checkers' feedback, the figures' words and the widgets' labels.

    ``code``: ``"en"`` (English, the default) or ``"zh-CN"`` (Simplified Chinese; ``"zh_CN"`` is accepted too).
    """
    global _current
    if not isinstance(code, str) or code not in _ALIASES:
        raise ValueError(f"set_language(code): code must be one of {list(LANGUAGES)}, got {code!r}")
    _current = _ALIASES[code]
    for listener in _listeners:
        listener(_current)


def on_language_change(listener: Callable[[str], None]) -> None:
    """Call ``listener(code)`` now and after every ``set_language``: how a wing follows the language without the
    core importing it (the display wing switches matplotlib's CJK fallback font on for Chinese)."""
    _listeners.append(listener)
    listener(_current)


def get_language() -> str:
    """The language selected by :func:`set_language`: ``"en"`` or ``"zh-CN"``."""
    return _current


@lru_cache(maxsize=None)
def translations(code: str) -> _gettext.NullTranslations:
    """The catalog of ``code`` (``"en"``: none, the messages are English). A missing ``.mo`` gives English."""
    if code == "en":
        return _gettext.NullTranslations()
    return _gettext.translation(DOMAIN, localedir=str(LOCALE_DIR), languages=[code.replace("-", "_")],
                                fallback=True)


def gettext(message: str) -> str:
    """``message`` in the current language (English when the catalog lacks it)."""
    return translations(_current).gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    """The singular or plural form of a message for ``n`` things, in the current language."""
    return translations(_current).ngettext(singular, plural, n)


def pgettext(context: str, message: str) -> str:
    """``message`` in the current language, where the same English word means two things (``context`` tells the
    translator which one: "score" of a head's behaviour is not an attention score)."""
    return translations(_current).pgettext(context, message)


def N_(message: str) -> str:
    """Marks a message for extraction without translating it (a constant named at import): translate it with
    :func:`gettext` where it is shown."""
    return message


class Messages(dict):
    """A dict whose values are msgids, read in the current language (``ROLE_TITLES["previous"]`` is
    "previous token" in English and its translation in Chinese): a notebook's code stays the same in both."""

    def __getitem__(self, key):
        return gettext(super().__getitem__(key))

    def get(self, key, default=None):
        return self[key] if key in self else default

    def values(self):
        return [self[key] for key in self]

    def items(self):
        return [(key, self[key]) for key in self]


_ = gettext

__all__ = ["LANGUAGES", "Messages", "N_", "get_language", "gettext", "ngettext", "on_language_change", "pgettext",
           "set_language", "translations"]
