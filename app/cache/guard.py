"""The lexical guard: a semantic match is served only if both questions say the same content words.

Embeddings score one-word edits ("avoid"/"add", "safe"/"unsafe", "full-time"/"part-time") at
0.85-0.998 while true paraphrases often score lower, so no threshold separates them. Lists of
opposites are never complete, so the guard works the other way round: it normalises both questions
(case, question frames, politeness, contractions, numbers written out, British spellings,
inflections, a few true synonyms), then aligns their content words. Every word that differs must be
shown equal: a known synonym (the lists), an inflection, or a typo of a known word. WordNet synonyms in
their most frequent sense (app/cache/wordnet.py) align too, but only on condition: `mismatch` then
says "meaning", and the two words must also read alike in their sentences (app/cache/context.py),
since a shared sense is broader than a question ("provinces"/"states"). Anything else (an antonym,
a negative prefix, a sibling value, an added qualifier, another number, unit, date or name) rejects
the match. Role words keep their objects: "from Paris to Rome" is not "from Rome to Paris".
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache
from itertools import pairwise

from app.cache import lexicon as lx
from app.cache import normalise, wordnet

_TIME = re.compile(r"\b(\d{1,2})(?:[:.](\d{2}))?\s*(a\.?m\b\.?|p\.?m\b\.?)")
_WORD_TIME = re.compile(r"\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)(?=\s*(?:o'clock\s*)?[ap]\.?m\b)")
_ORDINAL = re.compile(r"\b(\d+)(?:st|nd|rd|th)\b")
_CURRENCY = re.compile(r"([$€£¥])\s*(\d[\d,.]*)")
_CURRENCY_NAMES = {"$": "dollars", "€": "euros", "£": "pounds", "¥": "yen"}
# An operator between two operands ("5 + 3", "10/2", "x^2", "7 > 5", "a == b"; "/" and "x" only between digits,
# where they are no "and/or" or "km/h" and no letter): a token of its own, as is a letter name a symbol completes
# ("C++", "C#", "F#"). Without them "What is 5 + 3?" read as "What is 5 - 3?" and "hello world in C++" as "... in C".
_OPERATOR = re.compile(r"(?<=[\w)])\s*(==|!=|<=|>=|[+*×÷^=<>])\s*(?=[\w(])|(?<=\d)\s*([/x])\s*(?=\d)")
_OPERATOR_CANON = {"×": "*", "x": "*", "÷": "/"}
# A minus sign straight before a digit, not after a word, a digit or a point ("-5", "x[::-1]"; never "5-3",
# "2020-2021" or "COVID-19"), is the number's: "Is -5 less than 3?" is not "Is 5 less than 3?". A code operator of
# two or more symbols standing alone ("&&" / "||", "===") is a token wherever it stands.
_TOKEN = re.compile(r"(?:(?<![\w.])-)?\d+(?:[.,:]\d+)*(?:am|pm)?|[^\W\d_]+(?:\+\+|#)?"
                    r"|(?<!\S)(?:[=!]==?|<=|>=|&&|\|\||=>|->|[+*/^=<>])(?!\S)")
_DOUBLE_L = frozenset(
    ["cancelled", "cancelling", "travelled", "travelling", "traveller", "travellers", "labelled", "labelling", "modelled", "modelling", "fuelled", "fuelling", "levelled", "levelling", "signalled", "signalling", "totalled", "channelled", "dialled", "dialling", "equalled", "tunnelled", "counselling", "counsellor", "marvelled", "quarrelled"]
)
_NEGATIONS = frozenset(["not", "no", "never", "without", "none", "nothing", "nobody", "neither", "nor"])
# Reasons no second opinion may overrule: a number, a negation or a role (direction) that differs is
# a different question whatever a judge says. "words" and "order" are where the guard is unsure.
# "case": a unit or an acronym that differs in letter case or by one letter ("Mbps"/"MBps",
# "HLOOKUP"/"VLOOKUP"; app/cache/normalise.py). "modal": what may be done against what must or should
# be ("Can I ...?" / "Should I ...?", `_modal_changed`), or either against what is ("Do dogs ...?",
# `_modal_against_fact`).
# "symbol": an arithmetic or comparison operator ("5 + 3" / "5 - 3") or a name a symbol completes ("C" / "C++" /
# "C#") differs.
HARD_REASONS = frozenset({"number", "negation", "role", "case", "modal", "symbol"})


@dataclass(frozen=True, slots=True)
class Token:
    canon: str  # what is compared
    surface: str  # as written (lower case), for the typo check


@lru_cache(maxsize=1)
def known_words() -> frozenset[str]:
    """Whole English words of the embedding model's vocabulary; empty (no typo tolerance) without it."""
    try:
        from app.cache.onnx_export import source_dir

        lines = (source_dir() / "vocab.txt").read_text(encoding="utf-8").split()
    except Exception:  # noqa: BLE001 - the model package is not installed: typos simply do not match
        return frozenset()
    return frozenset(w for w in lines if w.isalpha() and w.isascii())


@lru_cache(maxsize=65536)
def _stem(w: str) -> str:
    """Inflections to one form ("bake", "baked", "baking", "bakes" -> "bak"); never strips a prefix."""
    if len(w) <= 3 or not w.isalpha() or w in _NEGATIONS:
        return w  # a negation is no inflection ("none", "nothing"): the guard reads it by its word
    if w.endswith(("ies", "ied")) and len(w) > 4:
        return w[:-3] + "y"
    for suffix in ("ing", "ed", "es", "s"):
        if w.endswith(suffix) and not w.endswith(("ss", "us", "is")) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)]
            # A consonant doubled before -ing/-ed ("stopping", "lagged") when the doubled form is no word
            # of its own ("purring" keeps "purr") and the single one with an "e" is none either, since
            # stems drop a final "e" ("hopping" is not "hoping", "scrapping" not "scraping").
            known = known_words()
            if (suffix in ("ing", "ed") and len(w) >= 4 and w[-1] == w[-2] and w[-1] in "bdgmnprt" and known
                    and w not in known and w[:-1] + "e" not in known):
                w = w[:-1]
            break
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]
    return w


@lru_cache(maxsize=65536)
def _spell(w: str) -> str:
    w = lx.CANONICAL.get(w, w)
    w = lx.SPELLING.get(w, w)
    if w in _DOUBLE_L:
        w = w.replace("ll", "l", 1)
    for ise, ize in (("isation", "ization"), ("ising", "izing"), ("ised", "ized"), ("ises", "izes"), ("ise", "ize")):
        if w.endswith(ise) and len(w) > len(ise) + 2 and (w[: -len(ise)] + "ise") not in lx.ISE_WORDS:
            return w[: -len(ise)] + ize
    return w


_SYNONYM = {_stem(_spell(w)): _stem(_spell(g.split()[0])) for g in lx.SYNONYMS for w in g.split()}


def _numbers(words: list[str]) -> list[str]:
    """Numbers written out become digits: "twenty five" -> "25", "fifteen percent" -> "15 percent"."""
    out: list[str] = []
    total = current = None
    for i, w in enumerate(words + [""]):
        counts = w in lx.NUMBER_WORDS and not (w == "one" and _pronoun_one(words, i))
        if counts or (w in lx.MULTIPLIERS and (current is not None or total is not None)):
            if w in lx.MULTIPLIERS:
                current = (current or 1) * lx.MULTIPLIERS[w]
                if lx.MULTIPLIERS[w] >= 1000:
                    total, current = (total or 0) + current, None
            else:
                current = (current or 0) + int(lx.NUMBER_WORDS[w])
            continue
        if current is not None or total is not None:
            out.append(str((total or 0) + (current or 0)))
            total = current = None
        if w:
            out.append(lx.ORDINAL_WORDS.get(w, w) if w != "first" or _ordinal_first(words, i) else w)
    return out


def _ordinal_first(words: list[str], i: int) -> bool:
    """ "first" before a noun, or a number, or after a determiner is an ordinal ("my first layer" / "my 1st
    layer", "the first 3 days", "is rent due on the first?" / "on the 1st?"); elsewhere it is an adverb
    ("which goes first", "what should I do first", "first, ..."), no number, and a rewording that puts
    the same things in order another way ("before or after") is a word more, not another number."""
    after = words[i + 1] if i + 1 < len(words) else ""
    if i > 0 and (words[i - 1] in _ONE_AFTER or words[i - 1] in _POSSESSIVES):
        return True
    return bool(after) and (after[:1].isdigit() or after in lx.NUMBER_WORDS or wordnet.noun(after))


def _pronoun_one(words: list[str], i: int) -> bool:
    """ "one" standing for a noun said before ("which one", "this one", "a diminished one", "the same one"):
    after a determiner, straight or with one word between, and before no noun. "for one site", "a one
    bedroom apartment", "two monitors or one" count."""
    before = words[max(0, i - 2):i]
    after = words[i + 1] if i + 1 < len(words) else ""
    if after and wordnet.noun(after):
        return False
    if before[-1:] and before[-1] in _ONE_AFTER:
        return True
    return (len(before) == 2 and before[0] in _ONE_AFTER and before[1].isalpha()
            and before[1] not in lx.NUMBER_WORDS and before[1] not in lx.MULTIPLIERS)


_ONE_AFTER = frozenset("a an the this that which what each every any another no either neither".split())
_POSSESSIVES = frozenset("my your our their his her its".split())


@lru_cache(maxsize=4096)
def tokens(text: str) -> tuple[Token, ...]:
    """The question's content words, canonical and in order."""
    t = unicodedata.normalize("NFKC", text).lower().replace("’", "'").replace("‘", "'")
    t = _WORD_TIME.sub(lambda m: lx.NUMBER_WORDS[m.group(1)], t)
    t = _TIME.sub(lambda m: f" {int(m.group(1))}:{m.group(2) or '00'}{m.group(3)[0]}m ", t)
    t = _CURRENCY.sub(lambda m: f" {m.group(2)} {_CURRENCY_NAMES[m.group(1)]} ", t)
    t = t.replace("%", " percent ")
    t = _ORDINAL.sub(r"\1", t)
    for pattern, repl in lx.CONTRACTIONS:
        t = pattern.sub(repl, t)
    t = t.strip(" \t\n?!.")
    t = _frames(t)
    topic = _topic_first(t)
    if topic is not None:
        t = _frames(topic)
    extraposed = _GERUND_SUBJECT.sub(_extraposed, t)
    if extraposed != t:
        t = _frames(extraposed)
    t = _ABLE.sub(_can_verb, t)
    t = _OPERATOR.sub(lambda m: f" {_OPERATOR_CANON.get(op := m.group(1) or m.group(2), op)} ", t)
    words = _numbers(_TOKEN.findall(t))
    out = []
    for w in words:
        spelled = _spell(w)
        if spelled in lx.IGNORABLE:
            continue
        canon = _stem(spelled)
        out.append(Token(_SYNONYM.get(canon, canon), w))
    return tuple(out)


def _frames(t: str) -> str:
    for frame, rewrite in lx.FRAMES:
        t = frame.sub(rewrite, t).strip(" \t\n?!.,:")
    return t


def _topic_first(t: str) -> str | None:
    """A question after its topic, the topic taken up again by a pronoun ("teenagers: how many hours of
    sleep do they need" / "how many hours of sleep do teenagers need", "green tea: how long do i steep
    it"): the question with the topic in the pronoun's place, or None. Only for one third-person
    pronoun ("it", "they", "them") standing once in the question, and a topic of at most six words
    that is no question of its own; the frames ("quick question:") have gone first."""
    m = _TOPIC.match(t)
    if m is None:
        return None
    topic, question = m.group(1).strip(), m.group(2)
    found = _RESUMPTIVE.findall(question)
    if len(found) != 1 or _RESUMPTIVE.search(topic) or topic.split()[0] in _OPENERS:
        return None
    return _RESUMPTIVE.sub(topic, question, count=1)


_TOPIC = re.compile(r"^((?:[\w'-]+ ){0,5}[\w'-]+)\s*:\s*(.+)$")
_RESUMPTIVE = re.compile(r"\b(?:it|they|them)\b")


# "Is V-ing X ADJ?" asks "Is it ADJ to V X?": English often moves such a subject behind "it" ("Is popping
# pimples harmful?" / "Is it harmful to pop pimples?"; "Reusing tea leaves: is it fine?", once the topic is
# taken up, reads "Is reusing tea leaves fine?" / "Is it fine to reuse tea leaves?" / "Can I reuse ...?").
_GERUND_SUBJECT = re.compile(r"^(is|was) ([a-z]+ing(?: [\w'-]+){0,5}?) ([a-z]+|a (?:good|bad) idea)$")


def _extraposed(m: re.Match) -> str:
    """ "is it ADJ to V-ing X" for "is V-ing X ADJ", or the text as it was: only where the first word is a
    verb's -ing form (WordNet: not "everything", "morning") and the last an adjective, not mostly a noun
    or a verb ("Is swimming good exercise?"). A gerund naming a thing ("Is cooking oil healthy?") is read the
    same way; both questions are rewritten alike, so that misreads only against one asking "Is it healthy
    to cook oil?"."""
    gerund, predicate = m.group(2).split()[0], m.group(3)
    if not wordnet.lemmas(gerund, "v") or gerund in _FUNCTION:
        return m.group(0)
    if " " not in predicate and (wordnet.adjective_senses(predicate) == 0 or wordnet.usual(predicate) & {"n", "v"}):
        return m.group(0)
    return f"{m.group(1)} it {predicate} to {m.group(2)}"


# "Is/Are X V-able?" asks "Can I V X?" ("Are home office expenses deductible?" / "Can I deduct home
# office expenses?", "Are PS4 games playable on a PS5?" / "Can I play PS4 games on a PS5?").
_ABLE = re.compile(r"^(?:is|are) ((?:[a-z0-9'-]+ ){1,6}?)([a-z]+)(?:able|ible)\b")


def _can_verb(m: re.Match) -> str:
    """The "Can I V X" reading of "Is X V-able", or the text as it was. Only where the adjective is the
    verb's "can be V-ed" (`able_verb`)."""
    verb = able_verb(m.string[m.start(2):m.end()])
    return f"can i {verb} {m.group(1).strip()}" if verb else m.group(0)


@lru_cache(maxsize=4096)
def able_verb(adjective: str) -> str | None:
    """The verb an "-able"/"-ible" adjective says "can be done" of ("deductible" -> "deduct", "playable" ->
    "play", "recyclable" -> "recycle", "forgettable" -> "forget", "reliable" -> "rely"), or None.

    A suffix is productive: "X is V-able" means "X can be V-ed" when V is mostly a verb (WordNet's
    tagged counts: "play", "deduct"; not "comfort", "value", "reason", "sense", whose adjectives say
    "having X") and the adjective is not one WordNet gives its own meanings: at most one adjective
    sense ("deductible", "washable"), or none (a coinage: "freezable"). "honorable", "notable",
    "valuable", "reliable" have several and keep their own meaning. Without WordNet: None."""
    if wordnet.lexicon() is None or not adjective.endswith(("able", "ible")) or len(adjective) < 7:
        return None
    if wordnet.adjective_senses(adjective) > 1:  # 0 where WordNet has no such adjective
        return None
    root = adjective[:-4]
    candidates = [root, root + "e"]
    if len(root) > 3 and root[-1] == root[-2]:
        candidates.append(root[:-1])  # "forgettable"
    if root.endswith("i"):
        candidates.append(root[:-1] + "y")  # "reliable"
    for verb in candidates:
        if len(verb) >= 3 and verb not in _FUNCTION and verb in wordnet.lemmas(verb, "v") and wordnet.usual(verb) == {"v"}:
            return verb
    return None


def mismatch(a: str, b: str) -> str | None:
    """Why two questions must not share an answer, or None when every content word lines up.

    "meaning": every word lines up, some only by WordNet meaning (`by_meaning`); those pairs must read
    alike in context as well (app/cache/context.py), so the guard alone does not serve them."""
    return _mismatch(a, b)[0]


def _mismatch(a: str, b: str) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """`mismatch`, and for "meaning" the pairs by meaning."""
    if normalise.case_conflict(a, b):
        return "case", ()
    ta, tb = tokens(a), tokens(b)
    if _addressee_swapped(a, ta, b, tb):
        return "role", ()
    if _modal_changed(ta, tb) or _modal_against_fact(a, ta, b, tb):
        return "modal", ()
    ca, cb = [t.canon for t in ta], [t.canon for t in tb]
    pairs: dict[str, str] | None = {}
    if Counter(ca) != Counter(cb):
        only_a, only_b = Counter(ca) - Counter(cb), Counter(cb) - Counter(ca)
        pairs = _typo_pairs(ta, tb, only_a, only_b)
        if pairs is None:
            # Light words on either side may go; what is left must pair up as typos.
            heavy_a = Counter({w: n for w, n in only_a.items() if w not in lx.LIGHT})
            heavy_b = Counter({w: n for w, n in only_b.items() if w not in lx.LIGHT})
            pairs = _typo_pairs(ta, tb, heavy_a, heavy_b)
            if pairs is None:
                # Pair what pairs; what is left may be filler on one side (see _filler), set aside
                # like a light word. The rest must still line up, roles and order included.
                pairs, rest_a, rest_b = _some_pairs(ta, tb, heavy_a, heavy_b)
                filler = _filler(ta, tb, rest_a, rest_b)
                if filler is None:
                    return _why(a, b, heavy_a or only_a, heavy_b or only_b), ()
                ca = [c for c in ca if c not in filler]
                cb = [c for c in cb if c not in filler]
            ca = [c for c in ca if c not in lx.LIGHT or c not in only_a]
            cb = [c for c in cb if c not in lx.LIGHT or c not in only_b]
        cb = [pairs.get(c, c) for c in cb]
    if _roles(ca) != _roles(cb) or _person_swapped(ca, cb):
        return "role", ()
    if ca != cb and not _one_block_moved(ca, cb) and not _one_block_moved(_heavy(ca), _heavy(cb)):
        return "order", ()
    if _arguments_swapped(ta, tb):
        return "role", ()
    meaning = by_meaning(ta, tb, pairs) if pairs else ()
    return ("meaning" if meaning else None), meaning


def by_meaning(ta, tb, pairs: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """(cached surface, asked surface) of the pairs that align only by WordNet meaning, not as typos."""
    surface_a = {t.canon: t.surface for t in ta}
    surface_b = {t.canon: t.surface for t in tb}
    return tuple((surface_a[a], surface_b[b]) for b, a in pairs.items()
                 if not is_typo(surface_a[a], surface_b[b]))


def _heavy(words: list[str]) -> list[str]:
    """The words that carry the question, for order: light words ("at", "what") may move; role words and
    persons may not ("who unfollowed me" / "who I unfollowed", "people hear me" / "I hear people")."""
    return [w for w in words if w not in lx.LIGHT or w in lx.ROLE_WORDS or w in _PERSONS]


_PERSONS = frozenset("i you we they he she".split())


def _filler(ta, tb, heavy_a: Counter, heavy_b: Counter) -> Counter | None:
    """Words a rewording adds or drops on ONE side, when they do not change what is asked; None otherwise.

    Free rewordings add or drop common words ("... every night", "... a good idea", "what causes
    ..."), while every trap changes a word: so words may differ on one side only (a word swapped for
    another is never filler), at most `MAX_FILLER` of them, each a common English word (among the
    model vocabulary's `COMMON_RANK` most frequent entries, which are ordered by frequency), never a
    number, a negation, a past tense, a role word or a quantifier that sets a scope (`_SCOPE`: "water every
    plant" / "water the plant"), never in front of a word both questions share
    (there it qualifies that word: "walk my dog" / "walk my senior dog"; determiners such as "my",
    "your", "can" excepted) and never after the last shared word (there it narrows the question:
    "is it safe to walk here" / "... at night").
    """
    if heavy_a and heavy_b:
        return None
    extra, tokens_ = (heavy_a, ta) if heavy_a else (heavy_b, tb)
    if not extra or sum(extra.values()) > MAX_FILLER:
        return None
    rank = vocab_rank()
    shared = {t.canon for t in ta} & {t.canon for t in tb}
    for i, t in enumerate(tokens_):
        if t.canon not in extra:
            continue
        if (not t.surface.isalpha() or t.surface in _NEGATIONS or t.canon in lx.PAST or t.canon in lx.ROLE_WORDS
                or t.surface in lx.ROLE_WORDS or t.surface in _SCOPE):
            return None
        if rank.get(t.surface, COMMON_RANK) >= COMMON_RANK:
            return None
        if i + 1 < len(tokens_) and tokens_[i + 1].canon in shared and t.canon not in lx.DETERMINERS:
            return None
        if not any(u.canon in shared for u in tokens_[i + 1:]):
            return None  # after the last shared word: a scope ("... at night", "... in my garden")
    return extra


# Quantifiers that set a scope a rewording never drops: "water every plant" / "water the plant", "check each
# tire" / "check the tire", "only on weekends" / "on weekends" (not "more difficult" for "harder").
_SCOPE = frozenset("every each all both only".split())
# Tuned on the tune split of bench/data/semantic_set.jsonl (README, "Semantic cache quality").
MAX_FILLER = 2
COMMON_RANK = 3500


@dataclass(frozen=True, slots=True)
class Unaligned:
    """The words a contextual check (app/cache/context.py) must pair for the guard's "no" to be overruled."""
    cached: tuple[str, ...]  # surfaces in the cached question with no counterpart in the new one
    asked: tuple[str, ...]  # and the other way round
    cached_words: tuple[str, ...]  # every content word of the cached question (what `asked` may pair with)
    asked_words: tuple[str, ...]
    added: frozenset[str] = frozenset()  # of those, the ones added or dropped, not put in place of others
    # (cached, asked) surfaces the guard paired only by WordNet meaning (`by_meaning`): each pair must also
    # read alike in its two sentences, WordNet's senses being broader than a question's ("provinces" /
    # "states" share a sense; in "How many provinces does Canada have?" they do not mean the same).
    meaning: tuple[tuple[str, str], ...] = ()


def unaligned(cached: str, asked: str) -> Unaligned | None:
    """The words that keep two questions from aligning, when the way they differ is a rewording's.

    None (the guard's "no" stands) unless, after typos and light words, at most `CONTEXT_MAX_WORDS`
    words differ, each a word of the model's vocabulary below rank `CONTEXT_RANK` (rarer words, the
    names and objects traps change, must match exactly) or, in another word's place and not only
    added, an everyday English word (`english_rank`), none a number, negation, past tense, role
    word, quantifier or a name (capitalised inside the sentence), no word of one side is a word of the
    other with a prefix ("graduate" / "undergraduate"), every role keeps its object, and the two
    questions differ in *structure*, not in one slot:
    - no single word stands in the place of a single other word with the same words around it (what
      every sibling, antonym and entity trap does: "large dog" / "small dog", "flu shot" / "tetanus
      shot"), unless WordNet gives the most frequent sense of one as a sense of the other, and not
      as its opposite ("who composed" / "who wrote"; app/cache/wordnet.py);
    - no word is added or dropped between two words both questions have in the same order (a
      qualifier: "filed last year" / "filed this year"), determiners excepted, and words WordNet knows
      that have no opposite in any sense ("my web browser", "how many times a week"), or, for a verb, none
      in its usual sense (`wordnet.polar_as_used`: "is rain expected", "does it take place"). A polar word
      ("last", "better", "senior") never is: a predicate a rewording moves there ("should I use oil
      on a board" / "is oil better for a board") reads alike in context with its opposite ("is oil
      bad for a board"), and a name or a word WordNet lacks may be anything;
    - no word is added or dropped after the last word both questions share (a scope: "... at night").
    What the contextual check then asks of each word is in app/cache/context.py. Identical words in
    another order are never returned: nothing differs, and the order is the point.
    """
    ta, tb = tokens(cached), tokens(asked)
    if _question(cached) and _question(asked) and _asks_how(cached) == _asks_how(asked):
        ta, tb = _without_lone_to(ta, tb)
    ca, cb = [t.canon for t in ta], [t.canon for t in tb]
    only_a, only_b = Counter(ca) - Counter(cb), Counter(cb) - Counter(ca)
    heavy_a = Counter({w: n for w, n in only_a.items() if w not in lx.LIGHT})
    heavy_b = Counter({w: n for w, n in only_b.items() if w not in lx.LIGHT})
    pairs, rest_a, rest_b = _some_pairs(ta, tb, heavy_a, heavy_b)
    paired = by_meaning(ta, tb, pairs)
    if paired:  # only then may the guard have aligned them by meaning (one more pass)
        why, meaning = _mismatch(cached, asked)
        if why == "meaning":
            # The guard aligns every word, some only by meaning: only those pairs are left to check.
            return Unaligned((), (), tuple(t.surface for t in tokens(cached)),
                             tuple(t.surface for t in tokens(asked)), meaning=meaning)
    words_a = [t for t in ta if t.canon in rest_a]
    words_b = [t for t in tb if t.canon in rest_b]
    if not words_a and not words_b or len(words_a) + len(words_b) > CONTEXT_MAX_WORDS:
        return None
    rank = vocab_rank()
    names = _names(cached) | _names(asked)
    everyday: set[tuple[int, str]] = set()  # rare to the model, common in English: never only added
    amounts = _amounts(ta) | _amounts(tb)
    for side, words in ((0, words_a), (1, words_b)):
        for t in words:
            if (not t.surface.isalpha() or t.surface in _NEGATIONS or t.canon in lx.PAST or t.canon in lx.ROLE_WORDS
                    or t.surface in lx.ROLE_WORDS or (t.surface in lx.QUANTIFIERS and t not in amounts)
                    or t.surface in names):
                return None
            if rank.get(t.surface, CONTEXT_RANK) >= CONTEXT_RANK:
                if english_rank().get(t.surface, ENGLISH_RANK) >= ENGLISH_RANK:
                    return None
                everyday.add((side, t.canon))
    if any(_prefixed(x.surface, y.surface) for x in words_a for y in words_b):
        return None
    if _units(ta) != _units(tb):
        # "how long in minutes" / "how many hours": a unit asked in another unit's stead; and a unit named
        # on one side only ("how long" / "how many seconds") asks for the answer in a unit the cached
        # answer may not be given in.
        return None
    kept_a = [c for c in ca if c not in rest_a and (c not in lx.LIGHT or c not in only_a)]
    kept_b = [pairs.get(c, c) for c in cb if c not in rest_b and (c not in lx.LIGHT or c not in only_b)]
    if _roles(kept_a) != _roles(kept_b) or _person_swapped(ca, [pairs.get(c, c) for c in cb]):
        return None
    added = _added(ta, tb, pairs, set(rest_a) | set(rest_b))
    if added is None or added & everyday:
        return None  # an added word the model knows little of may be any qualifier ("unpaid interns")
    return Unaligned(tuple(t.surface for t in words_a), tuple(t.surface for t in words_b),
                     tuple(t.surface for t in ta), tuple(t.surface for t in tb),
                     frozenset([t.surface for t in words_a if (0, t.canon) in added]
                               + [t.surface for t in words_b if (1, t.canon) in added]), paired)


@lru_cache(maxsize=1)
def english_rank() -> dict[str, int]:
    """Each word of the English word list (pyspellchecker's, as normalise reads it) by frequency, most
    frequent first; only its own counts, never the floor given to the model's words. The model's
    vocabulary is ordered by its training text, which lacks everyday words ("toxic", "install",
    "recommend", "spilled"): one of the `ENGLISH_RANK` most frequent English words may differ where
    the vocabulary calls it rare, when it stands in other words' place, never when only added (a
    qualifier: "unpaid interns", "wool fabric").  Names and specific things stay rare either way
    ("tetanus", "polyurethane", "gmail")."""
    words = normalise.frequencies()
    return {w: i for i, w in enumerate(sorted(words, key=lambda w: -words[w])) if words[w] > normalise.FLOOR + 1}


def _units(toks: tuple[Token, ...]) -> set[str]:
    """The units of measurement or time a question names (WordNet: app/cache/wordnet.py), canonical."""
    out = set()
    for i, t in enumerate(toks):
        if not t.surface.isalpha() or t.surface in _FUNCTION or not wordnet.unit(t.surface):
            continue
        before, after = [u.surface for u in toks[max(0, i - 2):i]], toks[i + 1].surface if i + 1 < len(toks) else ""
        if after == "old" or (before[-1:] and before[-1] in _FREQUENCY) or (
                len(before) == 2 and before[1] in ("a", "per", "every") and before[0] in _FREQUENCY):
            continue  # an age ("45 years old" / "forty-five") or a frequency's period ("how many times a week")
        out.add(min(wordnet.lemmas(t.surface, "n") or [t.canon]))  # "feet" and "foot" are one unit
    return out


_FREQUENCY = frozenset("times once twice often".split())  # "a" is no token, and "how many times" reads "how often"


def _amounts(toks: tuple[Token, ...]) -> set[Token]:
    """"many"/"much" straight after "how": part of the question word that asks for an amount ("how many
    hours of sleep" / "what amount of sleep"), not a quantifier that limits ("all"/"some"/"most")."""
    return {t for prev, t in pairwise(toks) if prev.surface == "how" and t.surface in ("many", "much")}


def _question(text: str) -> bool:
    """A question (a "?" at the end, or a question word first), not a statement: in a statement a "to"
    more or less is part of what is stated ("a nice catch" / "too small to keep")."""
    t = text.strip()
    first = _WORD.search(t)
    return t.endswith("?") or (first is not None and first.group(0).lower() in _OPENERS)


def _asks_how(text: str) -> bool:
    """A question asked with a question word or for a way ("how do I take it", "any way to take it"),
    not yes or no ("can I take it"): the "to" of "how to" is no infinitive to drop against "can I"
    ("How do I take ibuprofen with alcohol?" / "Can I take ibuprofen with alcohol?")."""
    return bool(_word_set(text) & _WH) or bool(_WAY_TO.search(text.lower()))


_WH = frozenset("how what why when where which who whose".split())
_WAY_TO = re.compile(r"\bways? to\b")
_OPENERS = frozenset("how what why when where who which whose can could should would will is are am do does did may "
                     "might must any".split())


def _without_lone_to(ta: tuple[Token, ...], tb: tuple[Token, ...]) -> tuple[tuple[Token, ...], tuple[Token, ...]]:
    """Both questions without "to" when one has a "to" more and no other role word differs: that "to"
    marks an infinitive ("how do I clear my cache" / "I need to clear my cache, how do I do it"), not
    a direction, which a rewording never drops without putting another role word in its place
    ("flights to Rome" / "flights from Rome")."""
    ca, cb = Counter(t.canon for t in ta), Counter(t.canon for t in tb)
    if ca["to"] == cb["to"]:
        return ta, tb
    if any(w in lx.ROLE_WORDS and w != "to" for w in (ca - cb) + (cb - ca)):
        return ta, tb
    # Only after a word that asks for a way or states a need ("how to", "way to", "need to"), never
    # after an adjective: "is it safe to run" states the question's polarity, and "Is running
    # dangerous?" reworded around it is the opposite question.
    more = ta if ca["to"] > cb["to"] else tb
    if any(t.canon == "to" and not _infinitive_to(more, i) for i, t in enumerate(more)):
        return ta, tb
    return tuple(t for t in ta if t.canon != "to"), tuple(t for t in tb if t.canon != "to")


def _infinitive_to(toks: tuple[Token, ...], i: int) -> bool:
    """toks[i] is a "to" that marks an infinitive, not a direction: after a word that asks for a way or
    states a need ("how to", "need to"), or between a word mostly used as a noun and one mostly used as a
    verb (WordNet), the infinitive that says what a thing is for ("the best wine to go with it", "the
    cost to run a fridge"). Never after an adjective ("is it safe to run": the adjective states the
    question's polarity) or a verb ("go to work", "get to sleep": a direction), nor before a noun."""
    if toks[i].canon != "to" or i == 0:
        return False
    before, after = toks[i - 1].surface, toks[i + 1].surface if i + 1 < len(toks) else ""
    if before in _INFINITIVE_FRAMES:
        return True
    return (before.isalpha() and after.isalpha() and wordnet.usual(before) == {"n"}
            and wordnet.usual(after) == {"v"})


def roles(toks: tuple[Token, ...]) -> Counter:
    """`_roles` of a question's tokens, an infinitive's "to" (`_infinitive_to`) set aside: its verb is a
    content word like any other, not the object of a direction ("the best wine to go with it" / "which
    wine goes best with it", "how to recall" / "can I recall")."""
    return _roles([t.canon for i, t in enumerate(toks) if not _infinitive_to(toks, i)])


def comparison_as_choice(ta: tuple[Token, ...], tb: tuple[Token, ...]) -> bool:
    """One question compares two things with "than" ("Does green tea have more caffeine than coffee?"), the
    other asks which of two it is ("Which has more caffeine, green tea or coffee?", "Green tea vs coffee:
    which has more caffeine?"). A choice names no direction: its answer answers the comparison either way
    round, so the comparison's "than" has no counterpart to keep (the things compared still must)."""
    for x, y in ((ta, tb), (tb, ta)):
        cx, cy = {t.canon for t in x}, {t.canon for t in y}
        if "than" in cx and "than" not in cy and "what" in cy and ("or" in cy or "vs" in cy):
            return True
    return False


_INFINITIVE_FRAMES = frozenset("how way ways need needs want wants have has had try trying going able".split())


def _added(ta, tb, pairs: dict[str, str], differing: set[str]) -> set[tuple[int, str]] | None:
    """(side, word) of the differing words that are added or dropped rather than put in another's place;
    None when the questions differ in one slot (see `unaligned`)."""
    xa = [t.canon for t in ta if t.canon not in lx.LIGHT]
    xb = [pairs.get(t.canon, t.canon) for t in tb if t.canon not in lx.LIGHT]
    surface_a = {t.canon: t.surface for t in ta}
    surface_b = {pairs.get(t.canon, t.canon): t.surface for t in tb}
    kind: dict[tuple[int, str], str] = {}
    for op, i1, i2, j1, j2 in SequenceMatcher(None, xa, xb, autojunk=False).get_opcodes():
        if (op == "replace" and i2 - i1 == 1 and j2 - j1 == 1 and xa[i1] in differing and xb[j1] in differing
                and not (surface_a[xa[i1]] not in _FUNCTION and surface_b[xb[j1]] not in _FUNCTION
                         and wordnet.one_sense(surface_a[xa[i1]], surface_b[xb[j1]]))):
            return None  # one word in another's place, the same words around it (not a shared word moved)
        if op == "replace":
            kind.update({(0, w): "replaced" for w in xa[i1:i2]} | {(1, w): "replaced" for w in xb[j1:j2]})
        elif op != "equal":
            for side, words in ((0, xa[i1:i2]), (1, xb[j1:j2])):
                for w in words:
                    kind.setdefault((side, w), "added")
            inside = 0 < i1 and i2 < len(xa) and 0 < j1 and j2 < len(xb) and xa[i1 - 1] == xb[j1 - 1] and xa[i2] == xb[j2]
            inserted = [(surface_a if w in xa[i1:i2] else surface_b)[w] for w in xa[i1:i2] + xb[j1:j2]
                        if w in differing and w not in lx.DETERMINERS]
            if inside and (any(not wordnet.known(w) or wordnet.polar_as_used(w) for w in inserted)
                           or _new_head(surface_a.get(xa[i1 - 1], xa[i1 - 1]), inserted)):
                return None  # a qualifier between two shared words
    added = {k for k, v in kind.items() if v == "added" and k[1] in differing}
    shared = set(xa) & set(xb)
    for side, w in added:
        seq = xa if side == 0 else xb
        last = len(seq) - 1 - seq[::-1].index(w)
        if not any(x in shared for x in seq[last + 1:]):
            return None  # after the last shared word: a scope
    return added


def _new_head(before: str, inserted: list[str]) -> bool:
    """A noun put straight after a noun becomes what is asked about ("betta fish" / "betta fish eggs",
    "dog" / "dog food"): the shared noun is then only its qualifier."""
    return bool(inserted) and wordnet.noun(before) and wordnet.noun(inserted[0])


def _names(text: str) -> set[str]:
    """Words capitalised inside a sentence (not a sentence's first word, not all capitals, not "I"): names."""
    out = set()
    for m in _WORD.finditer(text):
        w = m.group(0)
        if w[0].isupper() and not w.isupper() and not _SENTENCE_START.search(text[:m.start()]):
            out.add(w.lower())
    return out


def _prefixed(x: str, y: str) -> bool:
    """One word is the other with a prefix ("graduate" / "undergraduate", "safe" / "unsafe")."""
    return len(x) != len(y) and min(len(x), len(y)) >= 3 and (x.endswith(y) or y.endswith(x))


_WORD = re.compile(r"[^\W\d_]+")


def _word_set(text: str) -> set[str]:
    """The words of a text as written (letters only), lower-cased."""
    return {w.lower() for w in _WORD.findall(text)}


_SENTENCE_START = re.compile(r"(?:^|[.?!:]\s*)[\"'(]*$")

# Chosen on the tune split of bench/data/semantic_set.jsonl (README, "Semantic cache quality"): the
# vocabulary lists whole words from line ~1996 ("the") by frequency, so 10000 is about the 8,000 most
# common words; at most 5 differing words.
CONTEXT_RANK = 10000
CONTEXT_MAX_WORDS = 5
# Chosen on the tune splits (`--split tune`, `--data dev --split dev-tune`, `--data conversation-dev`):
# 8000-16000 serve the same there; 25000 served "than decaf coffee" for "than coffee".
ENGLISH_RANK = 12000


def _why(a: str, b: str, only_a: Counter, only_b: Counter) -> str:
    words = set(only_a) | set(only_b)
    if words & _NEGATIONS or _negated_word(a, b):
        return "negation"
    if any(is_number(w) for w in words):
        return "number"
    if any(not w.isalnum() for w in words):
        return "symbol"  # an operator, or a name a symbol completes ("C" / "C++")
    return "words"


# The prefixes that turn a word into its opposite, and little else of a word of four letters or more:
# lexicon's list less those that also make unrelated words ("code" / "decode", "take" / "mistake",
# "typical" / "atypical" is rare in questions).
_OPPOSING_PREFIXES = tuple(p for p in lx.NEGATING_PREFIXES if p not in ("de", "mis", "a", "anti", "counter", "non-"))


def _negated_word(a: str, b: str) -> bool:
    """A word of one question is a word of the other with a negating prefix ("legal" / "illegal", "safe" /
    "unsafe", "like" / "dislike"): the opposite question, as much as one with "not". A soft reason
    would let a judge overrule it, and a 1.5B judge's yes-probability for "Is it legal / illegal to
    drive with headphones?" (0.70-0.73) sits among true rewordings' (README, "Semantic cache quality").
    Read on the words as written, not on tokens: stems drop letters ("unsaf" / "saf"), and the question
    frames rewrite one side only ("Is it possible to" reads "can I", leaving "impossible" unpaired)."""
    words_a, words_b = _word_set(a), _word_set(b)
    return any(min(len(x), len(y)) >= 4 and _one_prefixes_other(x, y, _OPPOSING_PREFIXES)
               for x in words_a - words_b for y in words_b - words_a)


def _one_prefixes_other(x: str, y: str, prefixes: tuple[str, ...]) -> bool:
    """One word is the other with one of `prefixes` in front."""
    return any(x == p + y or y == p + x for p in prefixes)


def _typo_pairs(ta, tb, only_a: Counter, only_b: Counter) -> dict[str, str] | None:
    """Pair every unmatched word of b with an unmatched word of a it is a typo of (or a of b); None if not all pair."""
    if sum(only_a.values()) != sum(only_b.values()):
        return None
    surface_a = {t.canon: t.surface for t in ta}
    surface_b = {t.canon: t.surface for t in tb}
    left = list(only_a.elements())
    pairs = {}
    for cb in only_b.elements():
        match = next((ca for ca in left if _equal(surface_a[ca], surface_b[cb])), None)
        if match is None:
            return None
        left.remove(match)
        pairs[cb] = match
    return pairs


def _some_pairs(ta, tb, only_a: Counter, only_b: Counter) -> tuple[dict[str, str], Counter, Counter]:
    """Pair the unmatched words that pair (typos); the pairs and what is left on each side."""
    surface_a = {t.canon: t.surface for t in ta}
    surface_b = {t.canon: t.surface for t in tb}
    left = list(only_a.elements())
    pairs: dict[str, str] = {}
    rest_b: Counter = Counter()
    for cb in only_b.elements():
        match = next((ca for ca in left if _equal(surface_a[ca], surface_b[cb])), None)
        if match is None:
            rest_b[cb] += 1
            continue
        left.remove(match)
        pairs[cb] = match
    return pairs, Counter(left), rest_b


def _equal(x: str, y: str) -> bool:
    """Two differing words that say the same: a typo of one another, or WordNet synonyms in their usual
    senses (app/cache/wordnet.py)."""
    return is_typo(x, y) or (x.isalpha() and y.isalpha() and x not in _FUNCTION and y not in _FUNCTION
                             and wordnet.synonyms(x, y))


# Function words are never paired by meaning: WordNet's senses for them are nouns or rare uses ("us"
# is the United States, "all" is "whole" as an adverb); the guard's own rules decide them.
_FUNCTION = (lx.LIGHT | lx.QUANTIFIERS | lx.DETERMINERS | lx.ROLE_WORDS | lx.IGNORABLE | lx.PAST | _NEGATIONS
             | frozenset(lx.CANONICAL) | frozenset(lx.CANONICAL.values()) | _PERSONS | frozenset(["doing", "done"]))


def is_typo(x: str, y: str) -> bool:
    """One edit (insert, drop, swap two neighbours, replace) between a known word and an unknown one
    (or two unknown long ones: the vocabulary lacks many real words, "ibuprofen", "beginner").

    Two known words one edit apart ("steal"/"steel", "cloud"/"could") are different words, and a
    negating prefix ("typical"/"atypical") is never a typo.
    """
    if not (x.isalpha() and y.isalpha()) or min(len(x), len(y)) < 4 or max(len(x), len(y)) < 5:
        return False
    known = known_words()
    if x in known and y in known:
        return False  # two real words
    if x not in known and y not in known and min(len(x), len(y)) < 7:
        return False  # two unknown short words: too likely two names or codes
    if _one_prefixes_other(x, y, lx.NEGATING_PREFIXES):
        return False
    return normalise.one_edit(x, y)


@lru_cache(maxsize=1)
def vocab_rank() -> dict[str, int]:
    """Each whole word of the model's vocabulary and its line: BERT's uncased vocabulary lists word
    pieces by frequency after the special and single-character entries ("the" is line 1996)."""
    try:
        from app.cache.onnx_export import source_dir

        lines = (source_dir() / "vocab.txt").read_text(encoding="utf-8").split("\n")
    except Exception:  # noqa: BLE001 - the model package is not installed: no word counts as filler
        return {}
    return {w: i for i, w in enumerate(lines) if w.isalpha() and w.isascii()}


def _roles(words: list[str]) -> Counter:
    """(role word, the content word after it): direction, comparison and scope. A role word left at the end
    (stranded: "What country should I ship it to?") keeps its role with no word after it (None), so "to" and
    "from" there still differ."""
    out: Counter = Counter()
    for i, w in enumerate(words):
        if w in lx.ROLE_WORDS:
            nxt = next((v for v in words[i + 1:] if v not in lx.ROLE_WORDS), None)
            out[(w, nxt)] += 1
    return out


def _arguments_swapped(ta: tuple[Token, ...], tb: tuple[Token, ...]) -> bool:
    """The same words, two of them (nouns, numbers or names) standing the other way round: the arguments of a
    relation swapped, whose answer is the inverse or a no for a yes ("How many cups in a gallon?" / "How many
    gallons in a cup?", "1 USD in EUR" / "1 EUR in USD", "Is a square a rectangle?" / "Is a rectangle a
    square?", "What percentage of 80 is 20?" / "of 20 is 80"). Two words next to each other are one block
    moved, which a rewording may do, but a rewording that moves a word changes the words around it too ("a
    remote branch" / "a branch on the remote", "change my passwords" / "passwords be changed"), moves an adverb
    ("I play mostly blitz" / "I mostly play blitz"), or swaps the sides of an "or" ("tabs or spaces")."""
    a, b = [t.canon for t in ta], [t.canon for t in tb]
    if len(a) != len(b):
        return False
    differ = [k for k, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(differ) != 2:
        return False
    i, j = differ
    if (b[i], b[j]) != (a[j], a[i]) or {"or", "and"} & set(a[i + 1:j]):
        return False
    return all(_argument(ta[k].surface) for k in (i, j))


def is_number(word: str) -> bool:
    """A token that is a number ("5", "1.5", "9:00am", "-5")."""
    return word.lstrip("-")[:1].isdigit()


def _argument(word: str) -> bool:
    """A word that can be what a relation relates: a number, a noun, or a name or code WordNet does not know
    ("USD", "EUR")."""
    return is_number(word) or wordnet.noun(word) or (word.isalpha() and not wordnet.known(word))


def _person_swapped(a: list[str], b: list[str]) -> bool:
    """A person and the word next to it stand the other way round ("who unfollowed me" / "who I
    unfollowed", "people hear me" / "I hear people"): subject and object swapped, the words the same."""
    def pairs(words: list[str]) -> set[tuple[str, str]]:
        return {(x, y) for x, y in pairwise(words) if (x in _PERSONS) != (y in _PERSONS)}

    pa = pairs(a)
    # Only a pair that b has and a has the other way round and not also this way: "what should I do if I
    # capsize" holds both ("I", "if") and ("if", "I"), and is no swap of itself.
    return any((y, x) in pa and (x, y) not in pa for x, y in pairs(b))


def _addressee_swapped(a: str, ta: tuple[Token, ...], b: str, tb: tuple[Token, ...]) -> bool:
    """One question asks about the asker ("I", "me", "my") where the other, with the same words around,
    asks about the one asked ("you", "your"): "Why do I snore?" / "Why do you snore?", "How old am I?"
    / "How old are you?", "What is my name?" / "What is your name?". To a chat assistant "you" is the
    assistant, so the cached answer would speak of the wrong one. Only a person put in the other's
    place: a rewording that turns the question to the assistant ("Which moisturizer should I use?" /
    "What moisturizer do you recommend?") changes its verb too. Nor for a way of doing something
    asked both ways ("How do I boil an egg?" / "How do you boil an egg?"): after "how" and a helping
    verb, "you" is anyone (`_GENERIC_YOU`)."""
    pa, pb = _persons(ta), _persons(tb)
    if not ((pa == {1} and pb == {2}) or (pa == {2} and pb == {1})):
        return False
    if _GENERIC_YOU.search(a.lower()) and _GENERIC_YOU.search(b.lower()):
        return False
    ca, cb = [t.canon for t in ta], [t.canon for t in tb]
    return any(op == "replace" and i2 - i1 == j2 - j1 == 1 and _persons(ta[i1:i2]) | _persons(tb[j1:j2]) == {1, 2}
               for op, i1, i2, j1, j2 in SequenceMatcher(None, ca, cb, autojunk=False).get_opcodes())


def _modal_changed(ta: tuple[Token, ...], tb: tuple[Token, ...]) -> bool:
    """One question asks what may or can be done ("can", and the frames read as it: "may I", "is it ok /
    possible to"), the other what must or should be ("must", "should", "do I need to", "is it a good idea
    to"): "Can I bring my dog?" / "Must I bring my dog?", "Can I tip in Japan?" / "Should I tip in
    Japan?". A permission is not an obligation nor advice, so the answers differ; the contextual check
    cannot see it (modals are function words there). "should" and "must" may stand for each other
    ("Should I replace it?" / "Do I need to replace it?"), and a side with both or neither is no change."""
    ma, mb = {t.canon for t in ta} & _MODALS, {t.canon for t in tb} & _MODALS
    return (ma == {"can"} and bool(mb) and "can" not in mb) or (mb == {"can"} and bool(ma) and "can" not in ma)


_MODALS = frozenset("can must should".split())  # "could", "may I" and "might" are read as "can" first


def _modal_against_fact(a: str, ta: tuple[Token, ...], b: str, tb: tuple[Token, ...]) -> bool:
    """A yes/no question asked with a modal first against the same one asked of the fact with "do":
    "Should dogs eat grass?" / "Do dogs eat grass?", "Can my dog eat grass?" / "Does my dog eat grass?",
    "Must doctors recommend statins?" / "Do doctors ...?". What may, must or should be is not what is; the
    guard's filler rule and the contextual check both read a modal as a word a rewording may add. A
    question about what is right or good ("Is 8 am the right time ...?") asks advice too, and is left.
    The same with a question word first: `_wh_fact_against_modal`."""
    for (x, tx), (y, ty) in (((a, ta), (b, tb)), ((b, tb), (a, ta))):
        if {t.canon for t in ty} & _MODALS:
            continue
        if tx and tx[0].canon in _MODALS and _DO_FIRST.match(y.lower().lstrip(" \t\n\"'*")):
            if tx[0].canon != "can" and _asks_need(y):
                continue  # "Do they need extra food?" asks what should be, as "Should I give them ...?" does
            return True
        if _wh_fact_against_modal(y, x):
            return True
    return False


_DO_FIRST = re.compile(r"(?:do|does|did)\b")


def _asks_need(text: str) -> bool:
    """The question asks what is needed or required ("Do they need extra feeding?", "Do I have to tip?"): an
    obligation, as "should" and "must" ask it, not a fact. Not "recommend": "Do doctors recommend statins?"
    asks what doctors do."""
    words = [w.lower() for w in _WORD.findall(text)]
    return bool(_NEED & set(words)) or any(x in ("have", "has") and y == "to" for x, y in pairwise(words))


_NEED = frozenset("need needs require requires".split())


def _wh_fact_against_modal(fact: str, modal: str) -> bool:
    """A question word asked of what is or was done ("What do cats eat?", "Where did I put my keys?") against
    one asked of what should, must or can be ("What should cats eat?", "Where can pandas live?",
    "How long can dogs live?"): the fact is not the advice, the limit or the permission. Not where the
    question is the asker's own next step, which "do I" asks as often as "should I" ("Where do I file my
    taxes?", "Which cone do I fire it to?", "What do you eat before a run?", "What does one wear?"), unless
    a habit says it is a fact ("What do I do for a living?", "... usually ...") or "why" asks for a cause;
    not "how" straight before "do", which asks for a way or a mechanism ("How do I reset it?" / "How can I
    ...?", "How do bats see?" / "How can bats see?"); not a need or a recommendation asked with "do" (advice
    already: "How much sleep does a teenager need?"); not "would", "could", "may" or "might", which ask
    what is expected ("How long would it take?" / "How long does it take?", "Why would my car click?")."""
    f, m = _wh_question(fact), _wh_question(modal)
    if f is None or m is None or f.aux not in _DO_AUX or m.aux not in _DEONTIC:
        return False
    if f.aux == "did":
        return True  # what was done is a fact, whoever did it
    if f.bare_how or (f.wh == "why" and m.aux == "can"):  # "Why can't I sleep?" asks the cause too
        return False
    if _NORMATIVE & set(f.rest) or any(x in ("have", "has") and y == "to" for x, y in pairwise(f.rest)):
        return False
    if f.subject in _DELIBERATIVE and f.wh != "why":
        return bool(_HABIT & set(f.rest)) or "for a living" in " ".join(f.rest)
    return True


@dataclass(frozen=True, slots=True)
class WhQuestion:
    wh: str  # the question word
    bare_how: bool  # "how" straight before the auxiliary ("how do I", not "how often do I")
    aux: str  # the auxiliary that follows the question word's phrase ("do", "should", "is", ...)
    subject: str  # the word after the auxiliary ("not" skipped)
    rest: tuple[str, ...]  # the words after the auxiliary


@lru_cache(maxsize=4096)
def _wh_question(text: str) -> WhQuestion | None:
    """The first clause that asks with a question word, its phrase ("how many hours of sleep") and an
    auxiliary, subject after it; None where there is none or no inversion ("what I should eat", "tell me
    what cats eat"). Read from the text as written: the frames that make tokens drop "do"."""
    t = text.lower().replace("’", "'")
    for pattern, repl in lx.CONTRACTIONS:
        t = pattern.sub(repl, t)
    for clause in _CLAUSES.split(t):
        words = _WORD.findall(clause)
        i = next((k for k, w in enumerate(words) if w in _WH), None)
        if i is None:
            continue
        for j in range(i + 1, min(len(words), i + 7)):
            if words[j] in _PERSONS or words[j] in ("me", "it"):
                return None  # a subject before any auxiliary: no question's inversion
            if words[j] in _AUX:
                rest = tuple(w for w in words[j + 1:] if w != "not")
                return WhQuestion(words[i], words[i] == "how" and j == i + 1, words[j], rest[0] if rest else "", rest)
        return None
    return None


_CLAUSES = re.compile(r"[,;:.?!()\"]")
_DO_AUX = frozenset("do does did".split())
_DEONTIC = frozenset("should must ought shall can".split())  # "could", "would", "may", "might": what is expected
_AUX = _DO_AUX | _DEONTIC | frozenset("could would may might will is are am was were has have had".split())
# Subjects whose "do" may ask what to do next: the asker, "you" and "one" meant as anyone.
_DELIBERATIVE = frozenset("i we you one".split())
# Verbs with which a "do" question asks advice already.
_NORMATIVE = frozenset("need needs require requires recommend recommends suggest suggests advise advises".split())
# Words that make "do" a habit, not a next step ("What do I usually eat?").
_HABIT = frozenset("usually normally typically".split())


def _persons(toks: tuple[Token, ...]) -> set[int]:
    """1 for a word of the first person singular, 2 for one of the second person."""
    return {1 if t.canon in _FIRST else 2 for t in toks if t.canon in _FIRST or t.canon in _SECOND}


_FIRST = frozenset("i my myself".split())  # "me" and "mine" are canonical "i" and "my"
_SECOND = frozenset("you your yours yourself yourselves".split())
_GENERIC_YOU = re.compile(r"\bhow (?:do|does|did|can|could|should|would|will|must|might|may) (?:i|you)\b")


def _one_block_moved(a: list[str], b: list[str]) -> bool:
    """b is a with one contiguous run of words moved ("in Python, how to X" / "how to X in Python"), not
    a person ("who unfollowed me" / "who I unfollowed": the words are the same, the roles are not),
    unless inside a clause moved whole (`_CLAUSE`)."""
    n = len(a)
    if n != len(b) or n > 40:
        return False
    for i in range(n):
        for j in range(i + 1, n + 1):
            block, rest = a[i:j], a[:i] + a[j:]
            for k in range(len(rest) + 1):
                if k != i and rest[:k] + block + rest[k:] == b and (not _PERSONS & set(block) or block[0] in _CLAUSE):
                    return True
    return False


# A clause moved whole keeps its subject ("what should I do if I capsize" / "if I capsize, what should I do").
_CLAUSE = frozenset("if when whenever while because since unless once".split())
