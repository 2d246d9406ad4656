"""Conversations: when the earlier turns of a request match those of a cached conversation (issue 25).

A multi-turn request may be served an answer cached for another conversation when its context means
the same. The scope (app/cache/keys.py) makes the tenant, alias, parameters, system prompts, the
roles and order of the turns, and every turn that is more than a role and plain text (a name, tool
calls, a tool result) equal, word for word. The last user turn is then compared as a question (the
guard, contextual alignment, the judge: app/cache/verify.py). Each earlier turn must be the same text
or, turn by turn, match by these rules (`check`), and embed at cosine >= the threshold:

- a user turn is usually a statement ("I use the Android app.", "My dog is 12 years old."). It matches
  when the guard aligns its words (as for a question), or the contextual check does, or when it keeps
  the statement's facts and rewords the rest (`same_facts`): the same numbers, negations, names and
  rare words, and the two differ the way a rewording does (`guard.unaligned`: no word in another's
  place with the same words around it, no qualifier or scope added). "I'm on the Android app." matches
  "I use the Android app."; "I use the iPhone app.", "My dog is 12 weeks old.", "I'm not pregnant."
  do not;
- an assistant turn is what the model answered the turns before it. It matches when the guard aligns
  it, or when it states the same facts (numbers, negations, names, rare words) at cosine >= the
  threshold: the same model rewording its answer to a matching question, which a cache serving that
  question again already treats as one answer. Where its words are reworded too ("Using retinol every
  night at 45 is a common routine." / "Nightly retinol at 45 is a common routine."), a reply keeping
  the same facts goes to the contextual check, as a question does (app/cache/context.py: a word in
  another's place, a qualifier or a scope added, an opposite, never align). A reply that says another
  number, name, or yes instead of no is another context.

A turn longer than the model's window must be the same text. Measured in the README ("Conversations").
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from enum import Enum

from app.cache import guard
from app.cache import lexicon as lx


class Need(Enum):
    """What a differing pair of earlier turns still needs after the word rules (`check`)."""

    NO = "no"  # never the same context
    SIMILARITY = "similarity"  # cosine >= the threshold
    CONTEXT = "context"  # the contextual check (app/cache/context.py), then cosine >= the threshold


# A word is rare (a name or a specific thing the statement is about: "retinol", "catfish") when the
# model's vocabulary ranks it at or past this line, or lacks it; rare words must be in both turns.
RARE_RANK = 6000
_NEGATIONS = frozenset(["not", "no", "never", "without", "none", "nothing", "nobody", "neither", "nor"])


@dataclass(frozen=True, slots=True)
class Facts:
    numbers: Counter
    negations: int
    names: frozenset[str]
    rare: frozenset[str]


def facts(text: str) -> Facts:
    """What a statement asserts that a rewording must keep: numbers, negations, names, rare words."""
    toks = guard.tokens(text)
    rank = guard.vocab_rank()
    names = names_in(text)
    rare = frozenset(t.canon for t in toks
                     if t.surface.isalpha() and t.surface not in names and rank.get(t.surface, RARE_RANK) >= RARE_RANK)
    return Facts(Counter(t.canon for t in toks if guard.is_number(t.canon)),
                 sum(t.surface in _NEGATIONS for t in toks), names, rare if rank else frozenset())


def names_in(text: str) -> frozenset[str]:
    """Words capitalised inside a sentence (not a sentence's first word, not "I"), acronyms included: names."""
    out = set()
    for m in _WORD.finditer(text):
        w = m.group(0)
        if w[0].isupper() and w != "I" and not _SENTENCE_START.search(text[:m.start()]):
            out.add(w.lower())
    return frozenset(out)


_WORD = re.compile(r"[^\W\d_]+")
_SENTENCE_START = re.compile(r"(?:^|[.?!:]\s*)[\"'(]*$")


def same_facts(cached: str, asked: str) -> bool:
    return facts(cached) == facts(asked)


def check(role: str, cached: str, asked: str, use_guard: bool = True) -> Need:
    """What a differing pair of earlier turns (`role` "user" or "assistant") needs to match."""
    if not use_guard:
        return Need.SIMILARITY
    why = guard.mismatch(cached, asked)
    if why is None:
        return Need.SIMILARITY
    if why in guard.HARD_REASONS or why == "order" and _content_rearranged(cached, asked):
        return Need.NO
    if why == "meaning":
        return Need.CONTEXT  # words WordNet pairs must also read alike in context (guard.Unaligned.meaning)
    if same_facts(cached, asked) and (same_subject(cached, asked) or _reworded(cached, asked)):
        return Need.SIMILARITY
    # A question asked earlier may be reworded as a question is (app/cache/context.py), and so may a reply
    # that keeps its facts (the model's own wording); a user's statement only keeps its facts as above: in
    # a statement an added word is a qualifier ("I fly fish").
    if role == "assistant" and same_facts(cached, asked):
        return Need.CONTEXT
    return Need.CONTEXT if _asks(cached) and _asks(asked) else Need.NO


def _content_rearranged(cached: str, asked: str) -> bool:
    """The same content words in another order: who did what to whom ("My dog bit my cat." / "My cat
    bit my dog."), which keeps every fact and reads at cosine ~0.97. The guard leaves "order" to a
    judge in a question; an earlier turn has none. Light words moving ("I'm hiking in the desert in
    summer." / "I'll be hiking in the desert this summer.") is not this."""
    ca = [t.canon for t in guard.tokens(cached) if t.canon not in lx.LIGHT]
    cb = [t.canon for t in guard.tokens(asked) if t.canon not in lx.LIGHT]
    return ca != cb and Counter(ca) == Counter(cb)


def same_statement(cached: str, asked: str) -> bool:
    """Two one-turn requests that are first-person statements ("I use the Android app." / "I'm on the
    Android app.") and keep the same facts by the rules above: the reply to one is the reply to the
    other. A conversation that opens with a reworded statement then gets the cached reply, and its
    later turns can match the cached conversation's. Questions (a "?" or a question word anywhere)
    are never statements here."""
    return (_first_person_statement(cached) and _first_person_statement(asked)
            and check("user", cached, asked) is Need.SIMILARITY)


_FIRST_PERSON = re.compile(r"^(?:i|i'm|i’m|im|i've|i’ve|i'd|i’d|i'll|i’ll|my|we|we're|we’re|we've|we’ve|our)\b", re.IGNORECASE)
_QUESTION_WORDS = re.compile(r"\b(?:what|how|which|why|when|where|who|whom|whose|whether|if)\b", re.IGNORECASE)


def _first_person_statement(text: str) -> bool:
    t = text.strip()
    return bool(t) and "?" not in t and bool(_FIRST_PERSON.match(t)) and not _QUESTION_WORDS.search(t)


def _reworded(cached: str, asked: str) -> bool:
    """The guard's test of a rewording's structure (`guard.unaligned`), with no word only added or
    dropped: in a statement an added word qualifies it ("I fish" / "I fly fish")."""
    u = guard.unaligned(cached, asked)
    return u is not None and not u.added


def _asks(text: str) -> bool:
    return text.rstrip().endswith("?")


# Words that frame a first-person statement without changing its fact, written from general English
# usage: possession ("I have / I've got / I keep / I own two hives", "I have oily skin" / "My skin is
# oily"), pronouns, articles, the copula and light prepositions; they may come and go. Verbs of use
# and of making may stand for each other within their group only ("I use / I'm on the Android app",
# "I'm building / making a bookshelf"; not "I make" / "I use furniture"). Any other word must be in
# both turns.
_POSSESSION = "have has having got get getting own owning keep keeping there will"
_FRAME_WORDS = "the a an this that these those is are am be been being in on at for of about and"
_GROUPS = {"use": "use using on", "make": "make making build building"}
# Pronouns may change form with the frame ("I have" / "my skin is") but never person: "she has oily
# skin" is not "I have oily skin". The set of persons must be the same.
_PERSONS = {"i": "i me my mine myself", "we": "we us our ours ourselves", "you": "you your yours yourself",
            "he": "he him his himself", "she": "she her hers herself", "it": "it its itself",
            "they": "they them their theirs themselves"}


def _canon(words: str) -> frozenset[str]:
    return frozenset(t.canon for w in words.split() for t in guard.tokens(w))


_GROUP_OF = {c: name for name, words in _GROUPS.items() for c in _canon(words)}
_PERSON_OF = {c: name for name, words in _PERSONS.items() for c in _canon(words)}
_FRAME = (_canon(_POSSESSION) | _canon(_FRAME_WORDS)) - frozenset(_GROUP_OF) - frozenset(_PERSON_OF)


def _subject(text: str) -> tuple[list[str], Counter, frozenset[str]]:
    toks = guard.tokens(text)
    words = [_GROUP_OF.get(t.canon, t.canon) for t in toks if t.canon not in _FRAME and t.canon not in _PERSON_OF]
    roles = Counter((w, words[i + 1]) for i, w in enumerate(words[:-1]) if w in lx.ROLE_WORDS)
    return words, roles, frozenset(_PERSON_OF[t.canon] for t in toks if t.canon in _PERSON_OF)


def same_subject(cached: str, asked: str) -> bool:
    """The same words about the same things once the statement's frame is set aside, in any order,
    each role word ("from", "to", "with", "without") keeping the word after it, and the same persons."""
    (wc, rc, pc), (wa, ra, pa) = _subject(cached), _subject(asked)
    return Counter(wc) == Counter(wa) and rc == ra and pc == pa
