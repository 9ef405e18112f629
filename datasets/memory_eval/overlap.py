"""The paraphrase rule of the memory_eval set: no content word in common.

A word is a run of letters or digits, lower-cased; a content word is one not in
``STOPWORDS``; two words are "the same" when their crude stems match (see
:func:`stem`), so "stop" and "stopping", "task" and "tasks" count as shared.
"""

from __future__ import annotations

import re

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because
    been before being below between both but by can cannot could did do does doing
    down during each few for from further had has have having he her here hers
    herself him himself his how i if in into is it its itself just let me more most
    my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your
    yours yourself yourselves may must might shall also get got go goes went one
    two s t us like via per its it's yet ever""".split()  # noqa: SIM905 (reads as text)
)

_SUFFIXES = ("ingly", "edly", "ing", "ies", "ied", "ed", "es", "ly", "s", "e")


def stem(word: str) -> str:
    """A crude stem: a common suffix cut off, then at most the first 6 letters."""
    for suf in _SUFFIXES:
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            word = word[: -len(suf)]
            break
    return word[:6]


def content_stems(text: str) -> set[str]:
    """The stems of the content words of a text."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {stem(w) for w in words if w not in STOPWORDS}


def shared(a: str, b: str) -> set[str]:
    """The content-word stems two texts have in common."""
    return content_stems(a) & content_stems(b)
