"""Word lists for the lexical guard, written from general English usage (not from any evaluation set).

Everything here either makes two wordings equal (frames, politeness, spelling, numbers, synonyms,
function words) or marks words that must never be treated as equal (negation prefixes). Opposites
need no list: the guard rejects any changed content word that is not shown equal here.
"""

from __future__ import annotations

import re
from collections.abc import Callable


def _count(words: str) -> bool:
    """A number in digits or in words ("45", "forty-five", "twelve")."""
    return words.isdigit() or all(w in NUMBER_WORDS for w in re.split(r"[- ]", words))


# The periods a frequency is said in (frames below): "daily" = "every day".
_PERIOD_OF = {"daily": "day", "nightly": "night", "weekly": "week", "monthly": "month", "yearly": "year",
              "hourly": "hour", "annually": "year", "annual": "year"}
# Words ending in "s" that are no plural before "a day": "How many hours is a day on Mars?" keeps its day.
_NOT_PLURAL = frozenset("is was has does this his its as us yes plus less always perhaps whereas".split())


def _needs_a_thing(m: re.Match) -> bool:
    """ "What documents do I need to sell a house?": the question's object is what is needed ("need" is the
    verb, the infinitive says what for), not what must be done ("What do I need to bring?" = "What must I
    bring?"). Told by the infinitive's own object: after "what/which" and a noun or none, the verb after
    "to" takes a word that is no preposition ("sell a house", "make pancakes"); a preposition or nothing
    after it leaves the question's object to the verb ("bring", "know about taxes")."""
    before, after = m.string[:m.start()].split(), m.string[m.end():].split()
    if not before or before[0] not in ("what", "which") or len(before) > 4:
        return False
    return len(after) >= 2 and after[1] not in _PREPOSITIONS


_PREPOSITIONS = frozenset("to from into onto in on at for about with without by of over under before after "
                          "between through during across around near up down out off back".split())


# Question frames and politeness that carry no content; applied in order to lower-cased text.
Replacement = str | Callable[[re.Match], str]
_FRAMES: list[tuple[str, Replacement]] = [
    (r"^(?:hi|hey|hello|dear \w+)\b[,!.:]*\s*", ""),
    (r"^(?:quick question|question|one question|a question)\s*[:,-]\s*", ""),
    (r"^(?:i was wondering|i wonder|i(?:'d| would) like to know|i want to know|i need to know)\b[:,]?\s*(?:if|whether)?\s*", ""),
    (r"^(?:can|could|would|will) you (?:please )?(?:tell|show|explain to) me\b(?:\s+this)?[:,]?\s*", ""),
    (r"^(?:please )?(?:tell|show) me\b[:,]?\s*", ""),
    (r"^do you know\b[:,]?\s*", ""),
    # Thanks only as a sign-off after the question ("..., thanks!"), never "how do I say thank you".
    (r"(?:^|[?!.,;]\s*)(?:thanks(?: a lot| in advance)?|thank you(?: very much| so much)?|thx|cheers)\s*[.!]*\s*$", ""),
    (r"\b(?:please|kindly)\b", " "),
    (r"\bhow (?:do|can|should|could|would|might|does) (?:i|you|we|one)\b", "how to"),
    (r"\bhow (?:i|you|we|one) (?:can|could|should|would|do|might)\b", "how to"),
    (r"\bwhat(?:'s| is| are) (?:the )?(?:steps|way|best way|right way|correct way|proper way|process|procedure) (?:to|for)\b", "how to"),
    (r"\bwhat are the steps to\b", "how to"),
    (r"\bis there (?:a|any) way to\b", "how to"),
    # The same asked without "is there" ("Any way to stop it?", "Any tips to stop it?"): "any" opens the
    # question, it limits nothing.
    (r"^any (?:way|ways|tips?) to\b", "how to"),
    (r"\bexplain how to\b", "how to"),
    # Leave asked ("is it okay / fine / alright to X") is "can i X"; advice ("is it good / wise / time to X"),
    # "should i X".
    (r"\b(?:is it possible to|am i able to|am i allowed to|is it (?:ok|okay|fine|alright|all right) to|may i|could i)\b", "can i"),
    # Leave asked for someone else: "Is it okay for my dog to eat grapes?" = "Are grapes okay for my dog to
    # eat?" = "Can my dog eat grapes?" (the for-phrase is the infinitive's subject).
    (r"^is it (?:ok|okay|fine|alright|all right) for ((?:[\w'-]+ ){0,2}?[\w'-]+) to ", r"can \1 "),
    (r"^(?:is|are) ((?:[\w'-]+ ){0,4}?[\w'-]+) (?:ok|okay|fine|alright|all right) for ((?:[\w'-]+ ){0,2}?[\w'-]+) to (\w+)$",
     r"can \2 \3 \1"),
    (r"\bwould it be\b", "is it"),
    # The additive particle after the question is "also" before its verb ("Can I use vitamin C as well /
    # too?" = "Can I also use vitamin C?"); "too" elsewhere is a degree ("too late") and stays.
    (r"(?:,?\s+(?:as well|too))$", " also"),
    # "a different" is the determiner "another" ("transfer credits to a different / another university").
    (r"\ba different\b", "another"),
    # An event asked about with a verb of occurrence: "When will the next eclipse happen?" = "When is the
    # next eclipse?" (the tense stays: "did ... happen" is not rewritten).
    (r"^(when|where) (?:will|does|do) (.+?) (?:happen|occur|take place)$", r"\1 is \2"),
    (r"^(when|where) is (.+?) (?:happening|occurring|taking place)$", r"\1 is \2"),
    (r"\bis it (?:wise|good|a good idea|advisable|recommended|better|time) to\b", "should i"),
    # A period's frequency said five ways: "daily" = "every day" = "each day" = "per day" = "a day" after a
    # plural ("steps a day"); after a count it stays "a day" ("twice daily" = "twice a day", "3 times a week").
    (r"\b(daily|nightly|weekly|monthly|yearly|hourly|annually|annual)\b", lambda m: "every " + _PERIOD_OF[m.group(1)]),
    (r"\b(?:each|per) (day|night|week|month|year|hour|minute)\b", r"every \1"),
    (r"\b([a-z]+s) a (day|night|week|month|year|hour|minute)\b",
     lambda m: m.group(0) if m.group(1) in _NOT_PLURAL else f"{m.group(1)} every {m.group(2)}"),
    (r"\b(once|twice|times|\d+|one|two|three|four|five|six|seven|eight|nine|ten) every (day|night|week|month|year|hour|minute)\b",
     r"\1 a \2"),
    # Necessity asked three ways ("Do I need to / have to X?" = "Must I X?"; "Is a visa required / necessary /
    # needed for Japan?" = "Do I need a visa for Japan?"); advice ("should") and ability ("can") stay apart,
    # except where the question asks for an amount or a frequency: "How often should I / do I need to
    # inspect them?" ask for the same number.
    # A thing that "needs V-ing" needs to be V-ed (the gerund is passive): "How often does it need servicing?" =
    # "How often does it need to be serviced?" (only "it" / "they", whose gerund is what is done to them).
    (r"\b(it|they) (needs?) (?!(?:some|no|any|every)thing\b)([a-z]{3,}ing)\b", r"\1 \2 to be \3"),
    (r"\b(how (?:often|frequently|long|many|much|far)\b(?: [\w'-]+){0,4}?) (?:(?:do|does) (i|we|you|one|it|they) (?:need|have) to|must (i|we|you|one|it|they))\b",
     lambda m: f"{m.group(1)} should {m.group(2) or m.group(3)}"),
    (r"\b(?:do|does) (i|we|you|one) (?:need|have) to\b", lambda m: m.group(0) if _needs_a_thing(m) else f"must {m.group(1)}"),
    (r"\bis it (?:necessary|required) to\b", "must i"),
    (r"^(?:is|are) ((?:[\w'-]+ ){1,5}?)(?:necessary|required|needed)\b", lambda m: f"do i need {m.group(1).strip()}"),
    # The same advice asked with its subject first: "Is cardio on an empty stomach a good idea?".
    (r"^(?:is|are) ((?:\w+ ){1,6}?)(?:a good idea|advisable|recommended)$", r"should i \1"),
    # An age said without its unit is said in years: "I'm 45 and ..." = "I'm 45 years old and ..." (a number
    # straight after the verb, ending its clause; "a 12-year-old water heater" and "12 water heaters" keep theirs).
    (r"\b(am|is|are|was|were|be|turn|turns|turned) ([a-z]+(?:[- ][a-z]+)?|\d+)(?=\s*(?:$|[,.;!?]|\band\b|\bbut\b|\bso\b))",
     lambda m: f"{m.group(1)} {m.group(2)} years old" if _count(m.group(2)) else m.group(0)),
    # "go V-ing" is the activity: "I go trout fishing" = "I fish for trout", "Can I go swimming?" = "Can I swim?".
    (r"\b(?:go|goes|going) ((?:[a-z]+ )?[a-z]{2,}ing)\b", r"\1"),
    # The instrument: "I use a USB mic to record my podcast" = "I record my podcast with a USB mic".
    (r"\b(?:use|uses|using) ((?:[\w'-]+ ){0,3}?[\w'-]+) to (\w+)\b", r"with \1 \2"),
    # Where a thing is, said with a verb of position: "Does Mexico City lie above sea level?" = "Is Mexico City
    # above sea level?" (only before a preposition of place).
    (r"^(?:does|do) (.+?) (?:lie|sit|stand) (above|below|beneath|under|in|inside|on|at|near|beside|between|within|outside)\b",
     r"is \1 \2"),
    # A sentence opening with its subject's role: "As a beginner, I can't roll yet." = "I'm a beginner and I can't
    # roll yet." (the appositive says what the subject is).
    (r"^as (a|an) ((?:[\w'-]+ ){0,2}?[\w'-]+), (i|we) ",
     lambda m: f"{m.group(3)} {'am' if m.group(3) == 'i' else 'are'} {m.group(1)} {m.group(2)} and {m.group(3)} "),
    # A year of origin after its noun ends the phrase: "a bottle of Barolo from 2015" = "a bottle of 2015 Barolo".
    (r"\b([a-z][\w'-]*) from ((?:19|20)\d\d)(?=\s*(?:$|[.,;!?]))", r"\2 \1"),
    # A preposition in front of the question word is the one stranded after it: "For how long should I decant
    # it?" = "How long should I decant it for?", "To what temperature ...?" = "What temperature ... to?".
    (r"^(to|for|with|from|in|on|at|about|by) ((?:what|which|how|whom)\b.+)$", r"\2 \1"),
    (r"\bhow frequently\b", "how often"),
    (r"\b(?:turn|switch) on\b", "enable"),
    (r"\b(?:turn|switch) off\b", "disable"),
    (r"\bper cent\b", "percent"),
    (r"\bhow many times\b", "how often"),
    # Idioms for one verb or preposition ("close" alone is "shut": a synonym group below).
    (r"\bclose to\b", "near"),
    (r"\bget rid of\b", "remove"),
    (r"\bcut down(?: on)?\b", "reduce"),
    (r"\bhow to say\b", "what is"),
    # Cause, count and manner frames that ask the same thing ("what makes Mars red" / "why is Mars red",
    # "what is the number of moons of Jupiter" / "how many moons does Jupiter have").
    (r"\bwhat (?:makes|causes|is making|is causing) ((?:\w+ ){1,3})to (\w+)", r"why \1\2"),  # "what causes cats to purr"
    (r"\bwhat (?:makes|causes|made|caused|is making|is causing)\b", "why"),
    (r"\bwhat(?:'s| is) the reason(?: why| that)?\b", "why"),
    # "keep/prevent X from doing" is "stop X from doing" (only with "from": "keep the receipt" is not "stop" it).
    (r"\b(?:keep|prevent)\b(?=(?: \w+){1,3} from \w+ing\b)", "stop"),
    (r"\bwhat(?: is| are)? the number of\b", "how many"),
    (r"\bwhat number of\b", "how many"),
    (r"\bhow many ((?:\w+ ){1,3})(?:does|do) (.+?) have$", r"how many \1of \2"),
    (r"\bcan (?:i|you|we|one) (safely|legally) (\w+)", lambda m: f"is it {m.group(1)[:-2]} to {m.group(2)}"),
    (r"^can (?:i|you|we|one) (.+?) (safely|legally)$", lambda m: f"is it {m.group(2)[:-2]} to {m.group(1)}"),
    (r"\bcan (?:i|you|we|one) (\w+) (safely|legally)\b", lambda m: f"is it {m.group(2)[:-2]} to {m.group(1)}"),
]
FRAMES: list[tuple[re.Pattern, Replacement]] = [(re.compile(p), r) for p, r in _FRAMES]

CONTRACTIONS: list[tuple[re.Pattern, str]] = [(re.compile(p), r) for p, r in [
    (r"\bcan't\b|\bcannot\b", "can not"), (r"\bwon't\b", "will not"), (r"\bshan't\b", "shall not"),
    (r"n't\b", " not"), (r"'m\b", " am"), (r"'re\b", " are"), (r"'ve\b", " have"), (r"'ll\b", " will"),
    (r"'d\b", " would"), (r"\b(what|where|who|how|when|why|that|there|it|here)'s\b", r"\1 is"), (r"'s\b", ""),
]]

# Words that never change what a question asks, once frames are canonical.
# Auxiliaries too ("does X cover Y" / "is Y covered"): tense stays, since "was" and "did" are kept.
IGNORABLE = frozenset("a an the of just really actually basically simply here be do".split())

# Words a rewording adds or drops without changing what is asked: pronouns, non-role prepositions,
# conjunctions, "what/how/which" and frame verbs ("explain", "describe"). Never role words, negations,
# modals or degree words ("best", "most"), and only ever as an unmatched word, never in place of one.
LIGHT = frozenset(
    "what how which i you we it this that these those there in on at for about and or "
    "explain describe tell show define give list know some any also exactly mean meaning like "
    "please kind sort type way ways".split()
)

# Inflection and function-word variants that ask the same thing.
CANONICAL = {
    "is": "be", "are": "be", "am": "be", "be": "be", "were": "was", "does": "do", "has": "have", "could": "can",
    "me": "i", "mine": "my", "us": "we", "our": "we", "thru": "through", "till": "until", "til": "until",
    "ok": "okay", "which": "what", "versus": "vs", "v": "vs", "whilst": "while", "amongst": "among", "towards": "toward",
    "everyone": "everybody", "someone": "somebody", "nope": "no", "yep": "yes",
}

# Groups of interchangeable words (each group is one meaning). Only true synonyms: a group never
# holds words of different degree or direction.
SYNONYMS = [
    "buy purchase", "begin start commence", "fix repair mend", "big large", "fast quick rapid speedy",
    "help assist", "use utilize utilise", "show display", "photo photograph picture pic", "movie film",
    "delete remove erase", "need require", "allowed permitted", "enough sufficient", "shut close",
    "speak talk", "mistake error", "kid child", "kids children", "baby infant", "doctor physician",
    "sofa couch", "trash garbage rubbish", "vacation holiday", "cellphone mobile smartphone",
    "reduce decrease lower lessen", "increase raise boost", "choose pick select", "maybe perhaps",
    "often frequently", "simple easy", "answer reply respond", "automobile car", "intelligent smart",
    "correct accurate", "modify change alter edit", "create make", "chance possibility", "cost price",
    "store shop", "near nearby", "jump-start jumpstart", "email e-mail", "website site", "login log-in",
    "wifi wi-fi", "okay fine", "tv television", "fridge refrigerator", "stomach belly", "guy man",
    "attorney lawyer", "sick ill", "enable activate", "disable deactivate", "method way", "whole entire",
    "quickly rapidly", "hurt injure", "end finish", "every each", "locate find",
    "obtain get", "amount quantity",
]

# British and other spellings, mapped to one form.
SPELLING = {
    "colour": "color", "favour": "favor", "favourite": "favorite", "flavour": "flavor", "behaviour": "behavior",
    "neighbour": "neighbor", "honour": "honor", "humour": "humor", "labour": "labor", "harbour": "harbor",
    "centre": "center", "metre": "meter", "metres": "meters", "litre": "liter", "litres": "liters",
    "kilometre": "kilometer", "kilometres": "kilometers", "millimetre": "millimeter", "centimetre": "centimeter",
    "theatre": "theater", "fibre": "fiber", "tyre": "tire", "tyres": "tires", "mould": "mold", "grey": "gray",
    "licence": "license", "defence": "defense", "offence": "offense", "catalogue": "catalog", "dialogue": "dialog",
    "programme": "program", "cheque": "check", "aluminium": "aluminum", "aeroplane": "airplane", "plough": "plow",
    "jewellery": "jewelry", "pyjamas": "pajamas", "mum": "mom", "maths": "math", "practise": "practice",
    "enrol": "enroll", "fulfil": "fulfill", "artefact": "artifact", "sceptical": "skeptical", "judgement": "judgment",
    "ageing": "aging", "storey": "story", "doughnut": "donut", "cosy": "cozy", "anaesthesia": "anesthesia",
    "oestrogen": "estrogen", "paediatric": "pediatric", "haemoglobin": "hemoglobin", "manoeuvre": "maneuver",
}
# -ise/-ize and doubled-l verbs follow a rule; these -ise words are not spellings of -ize ones.
ISE_WORDS = frozenset(
    "advise advertise arise chastise comprise compromise despise devise disguise enterprise excise exercise "
    "expertise franchise improvise merchandise noise otherwise paradise poise praise premise promise raise "
    "revise rise supervise surmise surprise televise treatise wise concise precise cruise bruise anise "
    "mortise porpoise tortoise turquoise vise".split()
)

NUMBER_WORDS = {
    w: str(i) for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen".split()
    )
} | {"twenty": "20", "thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70",
     "eighty": "80", "ninety": "90", "hundred": "100", "thousand": "1000", "million": "1000000",
     "billion": "1000000000", "dozen": "12"}
# Not "pair": it counts pairs ("a pair of socks" is not "two socks") and is a verb as often ("pair my AirPods").
# Not "couple": it names two people ("a gift for a couple") as often, and "a couple of days" is a few. Not
# "single": it says unmarried or one-person ("a single parent", "a single room"). Not "none": a negation
# ("none of my plants grow"), which the guard reads as one only while it stays a word.
ORDINAL_WORDS = {
    "first": "1", "third": "3", "fourth": "4", "fifth": "5", "sixth": "6", "seventh": "7", "eighth": "8",
    "ninth": "9", "tenth": "10", "eleventh": "11", "twelfth": "12", "thirteenth": "13", "fourteenth": "14",
    "fifteenth": "15", "sixteenth": "16", "seventeenth": "17", "eighteenth": "18", "nineteenth": "19",
    "twentieth": "20", "thirtieth": "30", "hundredth": "100",
}
MULTIPLIERS = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}

# Prefixes that turn a word into its opposite: such a pair is never a typo or an inflection.
NEGATING_PREFIXES = ("un", "in", "im", "il", "ir", "non", "non-", "dis", "de", "mis", "anti", "counter", "a")

# Words after which the next content word has a role: "from Paris to Rome" is not "from Rome to Paris".
ROLE_WORDS = frozenset(
    "from to into onto than vs before after over under above below per toward between against via "
    "instead without with".split()
)

# Determiners and auxiliaries a rewording adds in front of a word without qualifying it ("my dog",
# "each day", "will happen"); any other added word in front of a shared word is a qualifier.
DETERMINERS = frozenset(
    "my your our their his her its every each can will would should may might must".split()
)
# Past tense: "who is" / "who was" ask about different times, so these are never filler.
PAST = frozenset("was were did had".split())
# Quantifiers set the scope of a question ("all" / "some insurance plans", "most" / "few people"): a
# rewording never changes one, so the contextual check (guard.unaligned) never aligns them.
QUANTIFIERS = frozenset(
    "all some any every each no none most many much few several both either half more less fewer only least".split()
)
