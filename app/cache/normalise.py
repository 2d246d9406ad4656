"""Near-repeats: the asked question as the cache compares it, with what does not change it taken out.

People type the same question in many ways: with a slip of the fingers ("chocoalte"), no apostrophes
("dont", "whats"), chat shorthand ("can u", "pls"), a greeting or filler in front ("Hey, quick
question:"), a sign-off after ("Thanks in advance!", "Cheers, Tom"), markdown, quotes or stray
whitespace. The embedding model splits a misspelt word into pieces and scores such a pair below the
threshold, and the guard (app/cache/guard.py) rejects the extra words. `normalise` rewrites the
question before it is embedded, stored and compared, so both sides of a comparison go through it:

- markup and whitespace: surrounding quotes, backticks, asterisks, "Q:", "#", ">" and list dashes, runs
  of spaces and newlines, emoji and emoticons, repeated "?!" ("???" -> "?");
- a greeting or filler at the start and a sign-off at the end (with the name after it), only when a
  question of three words or more is left;
- chat shorthand ("u", "ur", "pls", "thx", "w/", "b4", ...) and contractions typed without their
  apostrophe ("dont" -> "don't"), as whole lower-case words only;
- a misspelt word -> the known word one edit away (a letter dropped, added, replaced, or two
  neighbours swapped), only when the word is not itself a known word, is lower case (or the first word
  of a sentence, or the text is all capitals), has four letters or more and no digit, and one known
  word clearly outweighs every other candidate (`DOMINANCE` times as frequent); the first letter is
  taken as typed, and a text with mostly unknown words (another language, jargon) is left as it is,
  as are computing words the dictionary lacks ("const", "tuple", "admin"). Names, acronyms,
  code and numbers are never touched ("Tyleol", "HLOOKUP", "iPhone", "x86"), nor is a word that is
  itself a word ("cat" / "car", "form" / "from"): a real-word slip stays a different question.

The known words are the English dictionary of `pyspellchecker` (MIT, 160k words with frequencies,
shipped in its wheel, read once; no download) together with the embedding model's vocabulary. No
rule here can make two different questions equal that the guard would tell apart: every change is
one of the guard's own equivalences, or a typo repair narrower than its typo tolerance (one edit,
known word, unambiguous). The exact-match key (app/cache/keys.py) is computed on the request as
sent: normalising is only ever for the semantic lookup, which the guard checks.

`case_conflict` is the other side: a word that differs only in letter case inside the word ("Mbps" /
"MBps", "mW" / "MW") or an acronym one letter away from another ("HLOOKUP" / "VLOOKUP") makes two
questions different, although the guard (which reads lower case) would pair them.
"""

from __future__ import annotations

import gzip
import re
import unicodedata
from functools import lru_cache

import orjson

# Chosen on the near-repeat set's dev-tune split and the labelled set's tune split (README, "Semantic
# cache quality"): a correction needs its best candidate at least this many times as frequent as the
# next, and at least `MIN_FREQUENCY` in the dictionary's counts (its rarest words count 50).
DOMINANCE = 5.0
MIN_FREQUENCY = 100
MIN_LENGTH = 3
# A three-letter slip is repaired only into a very common word ("wht" -> "what", "sfe" -> "safe"): short
# lower-case words are often codes ("pex" is not "apex").
SHORT_MIN_FREQUENCY = 50_000
FLOOR = _FLOOR = 50  # the dictionary's count for its rarest words
UNKNOWN_SHARE = 0.4  # more unknown words than this share (and more than two): the text is left as it is
# Computing words the dictionary lacks (people ask a gateway's models about code): never "corrected".
_COMPUTING = frozenset("""
admin async await bool boolean const config configs dedupe dedup enum enums env json yaml toml regex regexes repo
repos rebase rebasing sudo chmod chown localhost tuple tuples struct structs stdin stdout stderr int ints args
kwargs dict dicts lambda lambdas namespace namespaces middleware backend backends frontend frontends runtime
runtimes dataframe dataframes params param init bitrate codec codecs firmware plugin plugins webhook webhooks
subnet subnets hostname hostnames username usernames timestamp timestamps dropdown checkbox checkboxes
tooltip navbar iframe iframes mutex mutexes refactor refactoring linter linters npm pip venv kubectl nginx
""".split())
_MAX_TEXT = 600  # longer texts are left as they are: a typo weighs little in a long text, and the lookup stays cheap

_SPACE = re.compile(r"\s+")
# Emoji and pictographs, and the common text emoticons.
_EMOJI = re.compile("[\U0001F000-\U0001FAFF\u2600-\u27BF\uFE0F\u200D]+")
_EMOTICON = re.compile(r"(?:^|\s)(?:[:;=]-?[)(DPp]|<3|\^\^|xD)(?=\s|$)")
_REPEAT = re.compile(r"([?!.])[?!.]+")
_WRAP = re.compile(r"^(?:[#>*\-•]+\s+|q\s*[:.]\s*|question\s*:\s*)", re.IGNORECASE)
_QUOTES = ("\"\"", "''", "``", "**", "__", "“”", "‘’", "**")

# Greetings and filler in front of a question; the second group only with punctuation after it
# ("Help! How do I ..." but not "Help me choose ...").
_GREETING = re.compile(
    r"^(?:(?:(?:hey|hi|hello|hiya|howdy|yo|greetings|good (?:morning|afternoon|evening)|dear \w+)(?: there| all| everyone| guys| folks| team| friends)?"
    r"|ok(?:ay)? so|so|um+|uh+|hmm+|sorry if this is a (?:dumb|stupid|silly|basic|noob) question,? but)\s*[,!.:;\-–—]*\s+"
    r"|(?:(?:quick|random|simple|small|silly|stupid|dumb|noob|newbie|beginner) question|(?:i have|i've got|got) a (?:quick |random |simple )?question(?: for you)?"
    r"|sorry if this is a (?:dumb|stupid|silly|basic|noob) question(?:,? but)?|sorry(?: to bother you)?|(?:can|could) (?:anyone|somebody|someone|you) help(?: me)?(?: out)?"
    r"|help(?: me)?(?: please| pls)?|(?:i )?need(?: some)? help|help needed|urgent|question for you|one more question|another question|asking for a friend|ok(?:ay)?)\s*[,!.:;?\-–—]+\s*)",
    re.IGNORECASE,
)
# Sign-offs after the question: after its punctuation (so "how do I say thanks" keeps its word), or,
# for chat shorthand, after a space; with a name after them ("Thanks, Maria", "- Tom").
_THANKS = (r"(?:thanks|thank you|thank u|thanku|thankyou|thnks|tysm|th+x+|thnx|thanx|ty|tia|cheers|many thanks|much appreciated|appreciate it|"
           r"any help (?:is |would be )?(?:much |greatly |really )?appreciated|(?:all )?help (?:is )?appreciated|"
           r"regards|best regards|kind regards|best wishes|please help|pls help|plz help|help please|help pls|asap|please|pls|plz)"
           r"(?:\s+(?:a lot|so much|very much|again|in advance|guys|all|everyone|folks))*")
_SIGNOFF = re.compile(
    rf"(?:(?<=[?!.,;:)*`\"'])\s*|\s+[-–—]\s*)(?:{_THANKS}[\s,!.:)]*)+(?:[-–—]?\s*[A-Z][a-z]{{1,15}})?[\s!.]*$"
    rf"|\s+(?:th+x+|tia|ty|tysm|thank u|pl+[sz]+|plea+se+|(?:pls|plz|please) help|(?:thx|thanks) in advance|asap(?: pls| plz| please)?"
    rf"|lol|lmao|haha+)[\s!.]*$",
    re.IGNORECASE,
)
_NAME_TAIL = re.compile(r"(?<=[?!.])\s*[-–—]\s*[A-Z][a-z]{1,15}\s*$")

# Whole lower-case words of chat shorthand (never a capitalised or upper-case word: "U" is uranium).
_SHORTHAND = {
    "u": "you", "ur": "your", "pls": "please", "plz": "please", "thx": "thanks", "b4": "before", "bc": "because",
    "cuz": "because", "coz": "because", "ppl": "people", "tmrw": "tomorrow", "tmr": "tomorrow", "msg": "message",
    "abt": "about", "rn": "right now", "idk": "I don't know", "smth": "something", "sth": "something",
    "some1": "someone", "any1": "anyone", "ne1": "anyone", "wat": "what", "wut": "what", "ya": "you", "thru": "through",
    "w/": "with", "w/o": "without", "wanna": "want to", "gonna": "going to", "gotta": "have to", "kinda": "kind of",
    "lemme": "let me", "gimme": "give me", "dunno": "don't know", "probs": "probably", "prob": "probably",
    "tho": "though", "becuase": "because", "2day": "today", "2morrow": "tomorrow", "2moro": "tomorrow",
    "2nite": "tonight", "gr8": "great", "l8r": "later", "pic": "picture", "pics": "pictures", "info": "information",
}
_SHORTHAND_RE = re.compile(r"(?<![\w/])(" + "|".join(re.escape(k) for k in sorted(_SHORTHAND, key=len, reverse=True)) + r")(?![\w/])")
# "r" is "are" only between a question word or pronoun and what follows ("how r u", "r there"); alone it may be the language R.
# "r" is "are" between two lower-case words ("how r u", "glasses r in"), unless it follows a word that
# would make it the language R ("in r", "learn r"); never at the end.
_ARE = re.compile(r"\b([a-z]+) r (?=[a-z])")
_NOT_ARE = frozenset("in with using use learn of for to and or like than vs about know".split())
# Contractions typed without the apostrophe ("its" is left alone; "cant" and "wont" are taken as "can't"
# and "won't", which keeps the negation: as words of their own they are rare in questions).
_APOSTROPHE = {
    "dont": "don't", "doesnt": "doesn't", "didnt": "didn't", "isnt": "isn't", "arent": "aren't", "wasnt": "wasn't",
    "werent": "weren't", "havent": "haven't", "hasnt": "hasn't", "hadnt": "hadn't", "shouldnt": "shouldn't",
    "wouldnt": "wouldn't", "couldnt": "couldn't", "mustnt": "mustn't", "neednt": "needn't", "im": "I'm", "ive": "I've",
    "youre": "you're", "youve": "you've", "theyre": "they're", "theyve": "they've", "whats": "what's", "hows": "how's",
    "wheres": "where's", "whos": "who's", "thats": "that's", "theres": "there's", "doesn": "doesn't", "cant": "can't",
    "wont": "won't",
}
_APOSTROPHE_RE = re.compile(r"\b(" + "|".join(_APOSTROPHE) + r")\b", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")
# Two words written as one word elsewhere ("e-mail", "tooth brush" / "toothbrush"): joined when the
# joined word is a known word; with a space only between two longer words that are not function
# words ("some time" / "sometime", "may be" / "maybe" differ).
_HYPHENATED = re.compile(r"\b([A-Za-z]+)-([A-Za-z]+)\b")
_SPACED = re.compile(r"\b([A-Za-z][a-z]{3,}|[A-Z]{4,}) ([a-z]{4,}|[A-Z]{4,})\b")
_FUNCTION = frozenset("some every from into with what when where which that this there here have been your their "
                      "about over under more most much many time they them then than also just only even".split())
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


@lru_cache(maxsize=1)
def frequencies() -> dict[str, int]:
    """Known lower-case words and how common each is: pyspellchecker's English dictionary, with the
    embedding model's whole words added (at the dictionary's floor) so no word the model knows is ever
    corrected. Empty without the package: then no word is corrected."""
    words: dict[str, int] = {}
    try:
        from importlib.resources import files

        raw = files("spellchecker").joinpath("resources", "en.json.gz").read_bytes()
        words = {w: int(n) for w, n in orjson.loads(gzip.decompress(raw)).items() if w.isalpha() and w.isascii()}
    except Exception:  # noqa: BLE001 - the package is missing: typos are left to the guard's own tolerance
        return {}
    from app.cache import guard
    from app.cache import lexicon as lx

    # Words the model or the guard's lists know are never corrected, however rare ("wifi", "colour").
    listed = {w for g in lx.SYNONYMS for w in g.split()} | set(lx.SPELLING) | set(lx.SPELLING.values()) | set(lx.CANONICAL)
    for w in guard.known_words() | {w for w in listed if w.isalpha()} | _COMPUTING:
        words[w] = max(words.get(w, 0), _FLOOR + 1)
    return words


def warm() -> None:
    """Read the dictionary now (at start-up), not on the first request."""
    frequencies()


_KEYBOARD = ("qwertyuiop", "asdfghjkl", "zxcvbnm")
_NEIGHBOURS = {
    ch: {row[c + d] for d in (-1, 1) if 0 <= c + d < len(row)}
    | {_KEYBOARD[r + d][c] for d in (-1, 1) if 0 <= r + d < 3 and c < len(_KEYBOARD[r + d])}
    for r, row in enumerate(_KEYBOARD) for c, ch in enumerate(row)
}
# How likely each slip is, relative to a letter replaced by a far one (a noisy-channel weight): two
# neighbours swapped keeps every letter, a letter dropped or doubled is common, a neighbouring key next.
SWAP, DROP, EXTRA, NEAR_KEY, OTHER_KEY = 10.0, 3.0, 3.0, 2.0, 1.0
_VOWEL = re.compile(r"[aeiouy]")
_GLUED = frozenset("how do does did can could you i is it what why where when who which should would will are there "
                   "this that a the to my in on of for not and or with me we your".split())


def _candidates(w: str, short: bool) -> dict[str, float]:
    """Every string one slip away from `w`, with how likely that slip is (the best way to get there).
    `short`: only words `w` is missing a letter of (a three-letter slip of a four-letter word)."""
    out: dict[str, float] = {}

    def put(c: str, weight: float) -> None:
        if out.get(c, 0.0) < weight:
            out[c] = weight

    # The first letter is taken as typed: slips there are rare, and the words one first letter away
    # are mostly other words the dictionary lacks ("gmail"/"mail", "json"/"son", "bitrate"/"nitrate").
    for i in range(1, len(w) + 1):
        a, b = w[:i], w[i:]
        for ch in _LETTERS:
            put(a + ch + b, DROP)  # the writer dropped `ch`
        if short:
            continue
        if b:
            put(a + b[1:], EXTRA)  # the writer typed a letter too many
            for ch in _LETTERS:
                if ch != b[0]:
                    put(a + ch + b[1:], NEAR_KEY if ch in _NEIGHBOURS.get(b[0], ()) else OTHER_KEY)
        if len(b) > 1 and b[0] != b[1]:
            put(a + b[1] + b[0] + b[2:], SWAP)
    out.pop(w, None)
    return out


def _same_word(x: str, y: str) -> bool:
    """Two forms of one word ("email" / "emails", "box" / "boxes"): which one was meant does not matter."""
    short, long_ = sorted((x, y), key=len)
    return long_ in (short + "s", short + "es")


@lru_cache(maxsize=16384)
def correct(word: str) -> str | None:
    """The known word a lower-case non-word is a slip of, or None (a known word, a code, ambiguous).

    Never a word with no vowel ("mbps", "kwh", "npm": units and codes), never one the dictionary knows
    (words of four letters or less at its floor count as unknown: "des" is a slip of "does"), and a
    three-letter word only as a four-letter word missing a letter ("wht" -> "what")."""
    freq = frequencies()
    if len(word) < MIN_LENGTH or not freq or not _VOWEL.search(word):
        return None
    known = freq.get(word, 0)
    if known > _FLOOR or (known and len(word) > 4):
        return None
    scored = [(freq[c] * weight, c, freq[c]) for c, weight in _candidates(word, len(word) < 4).items()
              if c in freq and len(c) >= 3]
    # A space left out between two function words ("howdo", "isthere"); never inside other words,
    # where a brand typed in lower case would split ("dropbox", "linkedin").
    scored += [(min(freq[a], freq[b]) * DROP, f"{a} {b}", min(freq[a], freq[b]))
               for a, b in ((word[:i], word[i:]) for i in range(1, len(word))) if a in _GLUED and b in _GLUED]
    scored.sort(reverse=True)
    if not scored or scored[0][2] < (MIN_FREQUENCY if len(word) > 3 else SHORT_MIN_FREQUENCY):
        return None
    best_score, best, _ = scored[0]
    rival = next((score for score, c, _ in scored[1:] if not _same_word(best, c)), 0.0)
    return best if best_score >= DOMINANCE * rival else None


def _respell(text: str) -> str:
    upper = text.isupper()
    freq = frequencies()
    words = [w.lower() for w in _WORD.findall(text) if len(w) >= 3 and "'" not in w]
    if sum(w not in freq for w in words) > max(2, UNKNOWN_SHARE * len(words)):
        return text  # mostly words the dictionary lacks: another language, or jargon, not typos
    out: list[str] = []
    last = 0
    for m in _WORD.finditer(text):
        w = m.group()
        if "'" in w or (m.end() < len(text) and text[m.end()] in "0123456789_-/.@" and m.end() + 1 < len(text) and text[m.end() + 1].isalnum()):
            continue  # a contraction, or part of a code, a version, a path or an address
        if m.start() > 0 and text[m.start() - 1] in "0123456789_-/.@":
            continue
        start_of_sentence = not text[:m.start()].strip() or text[:m.start()].rstrip()[-1] in ".?!:"
        if w.islower():
            fixed = correct(w)
        elif (upper and len(w) > 3) or (start_of_sentence and w[0].isupper() and w[1:].islower()):
            # In capitals a short word may be an acronym ("PEX"): only longer words are repaired there.
            low = correct(w.lower())
            fixed = None if low is None else low.upper() if upper else low.capitalize()
        else:
            continue  # a name, an acronym, mixed case: never touched
        if fixed is not None:
            out.append(text[last:m.start()] + fixed)
            last = m.end()
    return "".join(out) + text[last:] if out else text


def _strip_wrappers(t: str) -> str:
    for _ in range(3):
        before = t
        t = _WRAP.sub("", t).strip()
        for pair in _QUOTES:
            o, c = (pair[0], pair[1]) if len(pair) == 2 and pair not in ("**", "__") else (pair, pair)
            if len(t) > len(o) + len(c) and t.startswith(o) and t.endswith(c):
                t = t[len(o):len(t) - len(c)].strip()
        if t == before:
            break
    return t


@lru_cache(maxsize=4096)
def normalise(text: str) -> str:
    """The question as the semantic cache embeds, stores and compares it (see the module's docstring)."""
    if len(text) > _MAX_TEXT or "```" in text or "\n " in text or "\t" in text:
        return text  # long texts and anything that looks like code keep every character
    t = unicodedata.normalize("NFKC", text).replace("’", "'").replace("‘", "'")
    if not t.isascii():
        t = _fold_accents(t)
    t = _EMOJI.sub(" ", t)
    t = _EMOTICON.sub(" ", t)
    t = _SPACE.sub(" ", t).strip()
    t = _strip_wrappers(t)
    t = _REPEAT.sub(r"\1", t)
    for _ in range(3):  # "Hey everyone, quick question: ..."
        m = _GREETING.match(t)
        if not m or len(t[m.end():].split()) < 3:
            break
        rest = t[m.end():]
        t = rest[0].upper() + rest[1:] if t[0].isupper() else rest
    for _ in range(2):  # "Thanks in advance! Cheers, Tom"
        m = _SIGNOFF.search(t)
        if not m or len(t[:m.start()].split()) < 3:
            break
        t = t[:m.start()].rstrip(" ,-–—")
    t = _NAME_TAIL.sub("", t)
    t = _strip_wrappers(t)
    if not t.isupper():
        t = _SHORTHAND_RE.sub(lambda m: _SHORTHAND[m.group(1)], t)
        t = _ARE.sub(lambda m: m.group(0) if m.group(1) in _NOT_ARE else f"{m.group(1)} are ", t)
    upper = t.isupper()
    t = _APOSTROPHE_RE.sub(lambda m: m.group(1) if m.group(1).isupper() and not upper  # "IM": an acronym
                           else _keep_case(m.group(1), _APOSTROPHE[m.group(1).lower()]), t)
    t = _respell(t)
    t = _join(t)
    t = _SPACE.sub(" ", t).strip()
    return t if len(t.split()) >= 2 else text


def _fold_accents(t: str) -> str:
    """Accents off Latin letters ("café" -> "cafe", "jalapeño" -> "jalapeno"); other scripts as they are
    (a Japanese voicing mark is a different word)."""
    out: list[str] = []
    for ch in unicodedata.normalize("NFD", t):
        if unicodedata.combining(ch) and out and out[-1].isascii() and out[-1].isalpha():
            continue
        out.append(ch)
    return unicodedata.normalize("NFC", "".join(out))


def _join(t: str) -> str:
    freq = frequencies()
    if not freq:
        return t

    def hyphen(m: re.Match) -> str:
        joined = m.group(1) + m.group(2)
        return joined if joined.lower() in freq else m.group(0)

    def space(m: re.Match) -> str:
        a, b = m.group(1), m.group(2)
        if a.isupper() != b.isupper() or a.lower() in _FUNCTION or b.lower() in _FUNCTION or (a + b).lower() not in freq:
            return m.group(0)  # "JUMP START" and "jump start" join alike; "Jump START" is not one word
        return a + b

    return _SPACED.sub(space, _HYPHENATED.sub(hyphen, t))


def _keep_case(src: str, dst: str) -> str:
    if src.isupper() and len(src) > 1:
        return dst.upper()
    if src[0].isupper():
        return dst[0].upper() + dst[1:]
    return dst


_CASED = re.compile(r"[A-Za-z][A-Za-z0-9]*")


def case_conflict(a: str, b: str) -> bool:
    """Two questions that a case-blind comparison would pair but whose letter case says otherwise:
    a short word written with capitals inside it in one and differently in the other ("Mbps" /
    "MBps", "GB" / "Gb", "mW" / "MW"), or an acronym one letter away from another ("HLOOKUP" /
    "VLOOKUP"). A text in all capitals or all lower case carries no case, so it never conflicts."""
    if a.isupper() or b.isupper() or a.islower() or b.islower():
        return False
    wa, wb = set(_CASED.findall(a)), set(_CASED.findall(b))
    only_a, only_b = wa - wb, wb - wa
    if not only_a or not only_b:
        return False
    lower_b: dict[str, list[str]] = {}
    for w in only_b:
        lower_b.setdefault(w.lower(), []).append(w)
    for w in only_a:
        for v in lower_b.get(w.lower(), ()):
            if len(w) <= 5 and w[1:] != v[1:] and not w.islower() and not v.islower():
                return True  # the same letters, both written with capitals, differently after the first: a unit or an acronym
    acronyms_a = [w for w in only_a if _acronym(w)]
    acronyms_b = [w for w in only_b if _acronym(w)]
    return any(one_edit(x.lower(), y.lower()) for x in acronyms_a for y in acronyms_b)


def _acronym(w: str) -> bool:
    """All capitals (two letters or more) or capitals inside the word: a code, not an English word."""
    return len(w) >= 2 and (w.isupper() or any(c.isupper() for c in w[1:]))


def one_edit(x: str, y: str) -> bool:
    """One slip apart: a letter dropped, added or replaced, or two neighbours swapped (the guard's typo
    test too)."""
    if x == y or abs(len(x) - len(y)) > 1:
        return False
    if len(x) == len(y):
        diff = [i for i in range(len(x)) if x[i] != y[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and x[diff[0]] == y[diff[1]] and x[diff[1]] == y[diff[0]])
    short, long_ = (x, y) if len(x) < len(y) else (y, x)
    i = next((i for i in range(len(short)) if short[i] != long_[i]), len(short))
    return short[i:] == long_[i + 1:]
