"""A cheap check that a semantic match asks the same thing, not merely something similar.

Embeddings score one-word edits ("turn the lights on" / "off", "3 eggs" / "4 eggs") near 0.99 while
true paraphrases often score near 0.8, so no threshold alone separates them. A match is rejected when
the two questions differ in numbers, negation, polarity words, named entities, code identifiers,
units or language.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?|[A-Za-z_][\w.]*\w(?:\(\))?|`[^`]+`|[%$€£¥°]", re.UNICODE)
_POSSESSIVE = re.compile(r"['’]s$")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,:/]\d+)*")
_CODE = re.compile(
    r"`([^`]+)`"
    r"|(?<![\w-])(--?[a-z][\w-]*)"  # CLI flags
    r"|\b(__\w+__|[A-Za-z_]\w*(?:\.\w+)+(?:\(\))?|\w+\(\)|[a-z]+_\w+|[a-z]+[A-Z]\w*"  # dotted, calls, snake, camel
    r"|[a-z][\w-]*:[\w-]+|[a-z]+\d+[a-z\d]*)"  # key:value (CSS), letters then digits (http2, ec2)
    r"|\b((?:git|kubectl|docker|npm|pip|cargo|helm|yarn|systemctl)\s+[a-z][\w-]*)"  # subcommands
)

_SPELLED = {
    w: i for i, w in enumerate(
        # "one" is left out: far more often a pronoun ("how do I write one") than a count.
        "zero _ two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
} | {"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
     "hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9, "dozen": 12, "half": 0.5,
     "second": "2nd", "third": "3rd", "fourth": "4th", "fifth": "5th",
     "once": "1x", "twice": "2x", "double": "2x", "triple": "3x"}

_NEGATIONS = frozenset(
    "not no never none nothing nobody nowhere neither nor without cannot cant dont doesnt didnt isnt arent "
    "wasnt werent wont wouldnt shouldnt couldnt hasnt havent hadnt mustnt ni nicht kein keine pas jamais nunca".split()
)

# Words whose opposite turns a question around; each maps to its pair's id and side.
_POLAR_PAIRS = [
    ("on", "off"), ("up", "down"), ("increase", "decrease"), ("enable", "disable"), ("before", "after"),
    ("more", "less"), ("max", "min"), ("maximum", "minimum"), ("buy", "sell"), ("add", "remove"),
    ("open", "close"), ("start", "stop"), ("true", "false"), ("yes", "no"), ("left", "right"),
    ("above", "below"), ("higher", "lower"), ("fastest", "slowest"), ("best", "worst"), ("first", "last"),
    ("largest", "smallest"), ("biggest", "smallest"), ("longest", "shortest"), ("hot", "cold"),
    ("import", "export"), ("encrypt", "decrypt"), ("upload", "download"), ("push", "pull"),
    ("input", "output"), ("inside", "outside"), ("north", "south"), ("east", "west"), ("lock", "unlock"),
    ("install", "uninstall"), ("connect", "disconnect"), ("win", "lose"), ("early", "late"),
    ("cheapest", "most expensive"), ("positive", "negative"), ("asc", "desc"), ("ascending", "descending"),
    ("minimum", "maximum"), ("lowest", "highest"), ("oldest", "newest"), ("men", "women"), ("male", "female"),
    ("pros", "cons"), ("advantages", "disadvantages"), ("benefits", "risks"), ("internal", "external"),
    ("sync", "async"), ("synchronous", "asynchronous"), ("client", "server"), ("read", "write"),
    ("compress", "decompress"), ("encode", "decode"), ("serialize", "deserialize"), ("mean", "median"),
    ("man", "woman"), ("boy", "girl"), ("husband", "wife"), ("father", "mother"), ("son", "daughter"),
    ("adult", "child"), ("adults", "children"), ("largest", "tiniest"), ("heaviest", "lightest"),
    ("warmest", "coldest"), ("richest", "poorest"), ("strongest", "weakest"), ("most", "least"),
    ("cheap", "expensive"), ("day", "night"), ("summer", "winter"), ("spring", "autumn"), ("import", "export"),
]
# A word may sit in several pairs ("smallest" opposes both "largest" and "biggest").
_POLAR: dict[str, list[str]] = {}
for _i, _pair in enumerate(_POLAR_PAIRS):
    for _side, _w in enumerate(_pair):
        _POLAR.setdefault(_w, []).append(f"{_i}:{_side}")

_UNITS = {
    "km": ("km", "kilometer", "kilometers", "kilometre", "kilometres"),
    "mi": ("mi", "mile", "miles"),
    "m": ("meter", "meters", "metre", "metres"),
    "ft": ("ft", "foot", "feet"),
    "in": ("inch", "inches"),
    "cm": ("cm", "centimeter", "centimeters"),
    "mm": ("mm", "millimeter", "millimeters"),
    "kg": ("kg", "kilogram", "kilograms", "kilo", "kilos"),
    "lb": ("lb", "lbs", "pound", "pounds"),
    "g": ("gram", "grams"),
    "oz": ("oz", "ounce", "ounces"),
    "l": ("liter", "liters", "litre", "litres"),
    "gal": ("gallon", "gallons"),
    "c": ("celsius", "°c", "centigrade"),
    "f": ("fahrenheit", "°f"),
    "k": ("kelvin",),
    "s": ("second", "seconds", "sec", "secs"),
    "min": ("minute", "minutes", "mins"),
    "h": ("hour", "hours", "hr", "hrs"),
    "d": ("day", "days"),
    "wk": ("week", "weeks"),
    "mo": ("month", "months"),
    "yr": ("year", "years"),
    "usd": ("usd", "dollar", "dollars", "$"),
    "eur": ("eur", "euro", "euros", "€"),
    "gbp": ("gbp", "sterling", "£"),
    "jpy": ("jpy", "yen", "¥"),
    "pct": ("percent", "percentage", "%"),
    "kb": ("kb", "kilobyte", "kilobytes"),
    "mb": ("mb", "megabyte", "megabytes"),
    "gb": ("gb", "gigabyte", "gigabytes"),
    "tb": ("tb", "terabyte", "terabytes"),
    "mph": ("mph",),
    "kph": ("kph", "km/h"),
    "w": ("watt", "watts"),
    "kw": ("kw", "kilowatt", "kilowatts"),
    "v": ("volt", "volts"),
    "cal": ("calorie", "calories", "kcal"),
}
_UNIT_OF = {alias: unit for unit, aliases in _UNITS.items() for alias in aliases}

# Words that give the next entity a direction: "from Paris to Rome" is not "from Rome to Paris".
_ROLE_WORDS = frozenset({"from", "to", "into", "than", "vs", "versus"})

# Capitalised words that start questions rather than name things.
_NOT_ENTITIES = frozenset(
    "what how why when where who whom whose which can could would should will shall is are was were do does "
    "did the a an please tell explain give list describe show write make find i in on for if it its this that "
    "these those there my your our their his her we you they is's what's how's hey hi hello also and or but so "
    "then now is it's let let's compare define summarize translate calculate convert name provide create "
    "help suggest recommend at of to from by with about as be have has any some all each every one".split()
)

_STOPWORDS = {
    "en": ("the is are what how why of and to in for with does do you can which a an my your i it this that "
           "on at be have has about good way what's should would could me").split(),
    "es": "el la los las es son qué que cómo por para con una un del se".split(),
    "fr": "le la les est sont quel quelle comment pourquoi des une un du avec pour dans".split(),
    "de": "der die das ist sind was wie warum und mit für ein eine nicht den dem".split(),
    "it": "il lo la gli le è sono che come perché per con una uno del della".split(),
    "pt": "o a os as é são que como por para com uma um do da não".split(),
    "nl": "de het een is zijn wat hoe waarom en met voor van niet".split(),
}


@dataclass(frozen=True, slots=True)
class Signature:
    numbers: tuple
    negations: int
    polar: frozenset[str]
    entities: frozenset[str]
    code: frozenset[str]
    units: tuple[str, ...]  # in order: "5 km to miles" is not "5 miles to km"
    roles: frozenset[tuple[str, str]]  # (from|to|into|than, the entity, unit or number after it)
    language: str


def signature(text: str) -> Signature:
    """The features of a question that must agree for two questions to share an answer."""
    words = _WORD.findall(text)
    lower = [w.lower().replace("'", "").replace("’", "") for w in words]
    numbers = sorted(_NUMBER.findall(text)) + sorted(str(_SPELLED[w]) for w in lower if w in _SPELLED)
    negations = sum(1 for w, lw in zip(words, lower) if lw in _NEGATIONS or "n't" in w.lower() or "n’t" in w.lower())
    polar = frozenset(tag for w in lower for tag in _POLAR.get(w, ()))
    starts = _sentence_starts(text)
    entities = frozenset(
        _POSSESSIVE.sub("", w.lower()) for w, at in _words_at(text)
        if w[:1].isalpha() and w.lower() not in _NOT_ENTITIES
        and ((len(w) > 1 and w.isupper()) or (w[:1].isupper() and at not in starts))
    )
    code = frozenset(next(g for g in groups if g) for groups in _CODE.findall(text))
    units = tuple(_UNIT_OF[w] for w in lower if w in _UNIT_OF)
    roles = frozenset(
        (lower[i], lower[i + 1]) for i in range(len(words) - 1)
        if lower[i] in _ROLE_WORDS and (lower[i + 1] in entities or lower[i + 1] in _UNIT_OF or _NUMBER.fullmatch(words[i + 1]))
    )
    return Signature(tuple(numbers), negations, polar, entities, code, units, roles, _language(text, lower))


def mismatch(a: str, b: str) -> str | None:
    """Why two questions must not share an answer, or None when no difference was found."""
    sa, sb = signature(a), signature(b)
    for field in ("numbers", "negations", "entities", "code", "units", "roles", "language"):
        if getattr(sa, field) != getattr(sb, field):
            return field
    if _opposed(sa.polar, sb.polar):
        return "polar"
    return None


def _opposed(a: frozenset[str], b: frozenset[str]) -> bool:
    """Both sides of a polar pair appear, and the two questions use them differently ("on" vs "off").

    A polar word on one side only ("the best way to ...") is wording, not a reversal.
    """
    both = a | b
    return any(t[:-1] + ("1" if t[-1] == "0" else "0") in both and (t in a) != (t in b) for t in both)


def _words_at(text: str) -> list[tuple[str, int]]:
    return [(m.group(), m.start()) for m in _WORD.finditer(text)]


def _sentence_starts(text: str) -> set[int]:
    """Offsets of each sentence's first word: capitalised there by grammar, not because it is a name."""
    return {m.start(1) for m in _SENTENCE_START.finditer(text)}


_SENTENCE_START = re.compile(r"(?:^|[.?!:;]\s+|\n\s*)[\"'¿¡(]*(\w)")


def _language(text: str, lower: list[str]) -> str:
    for name, lo, hi in (("cjk", 0x3040, 0x9FFF), ("cyrillic", 0x0400, 0x04FF), ("arabic", 0x0600, 0x06FF),
                         ("greek", 0x0370, 0x03FF), ("devanagari", 0x0900, 0x097F), ("hangul", 0xAC00, 0xD7AF)):
        if sum(1 for ch in text if lo <= ord(ch) <= hi) > len(text) * 0.2:
            return name
    scores = {lang: sum(1 for w in lower if w in words) for lang, words in _STOPWORD_SETS.items()}
    for lang, marks in _LETTERS.items():
        scores[lang] += 2 * sum(1 for ch in marks if ch in text)
    best = max(scores, key=scores.get)
    return best if scores[best] > scores["en"] else "en"


# Letters and marks that English text does not use.
_LETTERS = {"es": "¿¡ñ", "pt": "ãõ", "de": "ßäöü", "fr": "œêâîûë", "it": "ìò", "nl": "ĳ"}
_STOPWORD_SETS = {lang: frozenset(words) for lang, words in _STOPWORDS.items()}
