"""Build the near-repeat development set: bench/data/near_repeat_set.jsonl (issue 25, helper p25n).

A near-repeat is the same question typed differently: typos (a letter dropped, doubled, swapped or hit
next to the right key), no punctuation or all capitals, contractions with and without apostrophes
("dont", "whats"), chat abbreviations ("u", "pls", "thx"), greetings, filler and sign-offs, markdown,
quotes and stray whitespace, British or American spelling, hyphenation ("e-mail"/"email"), digits or
words. The traps are questions one small change away that need another answer, many of them one
letter away (cat/rat, Mbps/MBps, HLOOKUP/VLOOKUP, methanol/ethanol, 2/3, can/can't, versions, units),
asked plainly and asked with the same noise, so that no normalisation may paper over them.

Written for this project by hand (the base questions and traps below) and by rule (the noise, from a
seeded generator): on topics that are in neither bench/data/semantic_set.jsonl nor
bench/data/independent_set.jsonl. Each pair is (a, b): `a` was cached, `b` is asked; in a quarter of
the true repeats the noisy text is the cached one. `split` goes by topic, sorted topics alternating
dev-tune / dev-check: choose on dev-tune (and the labelled set's tune split), confirm on dev-check.
Deterministic: the same file gives the same set.

    python bench/data/near_repeats.py
    python bench/semantic_cache.py --data near --split dev-tune
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

OUT = Path(__file__).resolve().parent / "near_repeat_set.jsonl"

# topic -> [(question, [(kind, trap), ...])]. Kinds: sib (sibling value), ant (opposite), neg, num,
# unit, ver (version or model), dir (direction), case (differs only in letter case), letter (a real
# word one letter away), ent (entity), scope.
BASES: dict[str, list[tuple[str, list[tuple[str, str]]]]] = {
    "browsers": [
        ("How do I clear the cache in Chrome?", [("ent", "How do I clear the cache in Firefox?"), ("sib", "How do I clear the cookies in Chrome?")]),
        ("How can I block pop-ups in Safari?", [("ant", "How can I allow pop-ups in Safari?")]),
        ("Why is my browser using 8 GB of memory?", [("unit", "Why is my browser using 8 MB of memory?")]),
        ("How do I open a private window in Firefox?", [("ant", "How do I close a private window in Firefox?")]),
        ("Can I sync bookmarks between Chrome and Edge?", [("sib", "Can I sync passwords between Chrome and Edge?")]),
        ("How do I disable JavaScript in my browser?", [("ant", "How do I enable JavaScript in my browser?")]),
    ],
    "email": [
        ("How do I set up an email forwarding rule in Gmail?", [("sib", "How do I set up an email filtering rule in Gmail?")]),
        ("Why are my emails going to the spam folder?", [("sib", "Why are my emails going to the trash folder?")]),
        ("What is the maximum attachment size in Outlook?", [("ent", "What is the maximum attachment size in Gmail?")]),
        ("How do I recall a sent message in Outlook?", [("letter", "How do I resend a sent message in Outlook?")]),
        ("Can I schedule an email to send tomorrow morning?", [("sib", "Can I schedule an email to send tomorrow evening?")]),
        ("How do I add a signature to my emails?", [("ant", "How do I remove the signature from my emails?")]),
    ],
    "gaming": [
        ("Can a PS4 controller work on a PS5?", [("dir", "Can a PS5 controller work on a PS4?"), ("ver", "Can a PS3 controller work on a PS5?")]),
        ("How do I fix lag in online games?", [("ant", "How do I fix lag in offline games?")]),
        ("Is 60 Hz enough for competitive gaming?", [("unit", "Is 60 fps enough for competitive gaming?"), ("num", "Is 144 Hz enough for competitive gaming?")]),
        ("How much storage does the Nintendo Switch have?", [("ver", "How much storage does the Nintendo Switch 2 have?")]),
        ("Why does my game crash on startup?", [("ant", "Why does my game crash on shutdown?")]),
        ("How do I transfer saves from Xbox One to Xbox Series X?", [("dir", "How do I transfer saves from Xbox Series X to Xbox One?")]),
    ],
    "laundry": [
        ("Can I wash wool sweaters in the washing machine?", [("sib", "Can I wash silk sweaters in the washing machine?")]),
        ("How do I remove red wine stains from a carpet?", [("sib", "How do I remove red wine stains from a shirt?"), ("sib", "How do I remove white wine stains from a carpet?")]),
        ("What temperature should I wash towels at?", [("sib", "What temperature should I dry towels at?")]),
        ("Why do my clothes smell after washing?", [("sib", "Why do my clothes shrink after washing?")]),
        ("How much detergent should I use for a full load?", [("sib", "How much detergent should I use for a half load?")]),
        ("Can I put sneakers in the dryer?", [("sib", "Can I put sneakers in the washer?")]),
    ],
    "woodworking": [
        ("What grit sandpaper should I use before staining oak?", [("sib", "What grit sandpaper should I use before staining pine?"), ("ant", "What grit sandpaper should I use after staining oak?")]),
        ("How do I keep wood from splitting when driving screws?", [("sib", "How do I keep wood from splitting when driving nails?")]),
        ("Is a 12V drill powerful enough for furniture?", [("num", "Is a 20V drill powerful enough for furniture?")]),
        ("How long does wood glue take to dry?", [("sib", "How long does wood stain take to dry?")]),
        ("Should I use a jigsaw for curved cuts?", [("ant", "Should I use a jigsaw for straight cuts?")]),
        ("What is the best finish for an outdoor table?", [("ant", "What is the best finish for an indoor table?")]),
    ],
    "plumbing": [
        ("How do I unclog a bathroom sink?", [("sib", "How do I unclog a kitchen sink?")]),
        ("Why is my water heater making a popping noise?", [("sib", "Why is my water heater making a hissing noise?")]),
        ("How do I replace a toilet flapper?", [("sib", "How do I replace a toilet flange?")]),
        ("What size pipe do I need for a shower drain?", [("sib", "What size pipe do I need for a sink drain?")]),
        ("Can I use PEX for hot water lines?", [("sib", "Can I use PVC for hot water lines?")]),
        ("How do I fix low water pressure in the shower?", [("ant", "How do I fix high water pressure in the shower?")]),
    ],
    "smarthome": [
        ("Do smart plugs work with 5 GHz Wi-Fi?", [("num", "Do smart plugs work with 2.4 GHz Wi-Fi?")]),
        ("How do I reset a Nest thermostat?", [("sib", "How do I reset a Nest doorbell?")]),
        ("Can Alexa control Philips Hue lights?", [("ent", "Can Siri control Philips Hue lights?")]),
        ("Why does my smart bulb keep disconnecting?", [("sib", "Why does my smart lock keep disconnecting?")]),
        ("How many devices can a Zigbee hub handle?", [("ent", "How many devices can a Z-Wave hub handle?")]),
        ("Is it safe to leave a robot vacuum running while I'm out?", [("sib", "Is it safe to leave a robot vacuum charging while I'm out?")]),
    ],
    "transit": [
        ("How much is a monthly bus pass?", [("sib", "How much is a weekly bus pass?"), ("sib", "How much is a monthly train pass?")]),
        ("Can I bring a bike on the subway?", [("sib", "Can I bring a dog on the subway?")]),
        ("What time does the last train leave tonight?", [("ant", "What time does the first train leave tonight?")]),
        ("Do kids under 5 ride for free?", [("num", "Do kids under 12 ride for free?")]),
        ("How do I get a refund for a cancelled train ticket?", [("sib", "How do I get a refund for a delayed train ticket?")]),
        ("Is the airport shuttle wheelchair accessible?", [("sib", "Is the airport train wheelchair accessible?")]),
    ],
    "wine": [
        ("What temperature should red wine be served at?", [("sib", "What temperature should white wine be served at?")]),
        ("How long does an opened bottle of wine last?", [("neg", "How long does an unopened bottle of wine last?")]),
        ("Does Merlot go well with steak?", [("sib", "Does Merlot go well with salmon?"), ("ent", "Does Malbec go well with steak?")]),
        ("Should I decant a 10 year old Bordeaux?", [("num", "Should I decant a 2 year old Bordeaux?")]),
        ("What is the difference between Champagne and Prosecco?", [("ent", "What is the difference between Champagne and Cava?")]),
        ("How many glasses of wine are in a magnum?", [("sib", "How many glasses of wine are in a bottle?")]),
    ],
    "knitting": [
        ("What size needles do I need for chunky yarn?", [("sib", "What size needles do I need for fingering yarn?")]),
        ("How do I cast on for a scarf?", [("ant", "How do I cast off for a scarf?")]),
        ("What is the difference between knit and purl stitches?", [("sib", "What is the difference between knit and slip stitches?")]),
        ("How many stitches should I cast on for a baby blanket?", [("sib", "How many stitches should I cast on for an adult blanket?")]),
        ("How do I fix a dropped stitch?", [("sib", "How do I fix a twisted stitch?")]),
        ("Can I machine wash merino wool?", [("sib", "Can I machine dry merino wool?")]),
    ],
    "docker": [
        ("How do I remove all stopped containers in Docker?", [("ant", "How do I remove all running containers in Docker?"), ("sib", "How do I remove all unused images in Docker?")]),
        ("What is the difference between CMD and ENTRYPOINT in a Dockerfile?", [("sib", "What is the difference between COPY and ADD in a Dockerfile?")]),
        ("How do I expose port 8080 from a container?", [("num", "How do I expose port 8000 from a container?")]),
        ("Why is my Docker image 2 GB?", [("unit", "Why is my Docker image 2 MB?")]),
        ("How do I mount a volume read-only?", [("ant", "How do I mount a volume read-write?")]),
        ("Can I run Docker on an M1 Mac?", [("ent", "Can I run Docker on an Intel Mac?")]),
    ],
    "javascript": [
        ("What is the difference between let and var in JavaScript?", [("sib", "What is the difference between let and const in JavaScript?")]),
        ("How do I check if an array is empty in JavaScript?", [("sib", "How do I check if an object is empty in JavaScript?")]),
        ("Why does 0.1 + 0.2 not equal 0.3 in JavaScript?", [("num", "Why does 0.1 + 0.2 not equal 0.4 in JavaScript?")]),
        ("How do I convert a string to a number in JavaScript?", [("dir", "How do I convert a number to a string in JavaScript?")]),
        ("What does the triple equals operator do in JavaScript?", [("sib", "What does the double equals operator do in JavaScript?")]),
        ("How do I sort an array of numbers in JavaScript?", [("sib", "How do I sort an array of strings in JavaScript?")]),
    ],
    "printing3d": [
        ("What nozzle temperature should I use for PLA?", [("sib", "What nozzle temperature should I use for PETG?"), ("sib", "What bed temperature should I use for PLA?")]),
        ("Why is my first layer not sticking to the bed?", [("ant", "Why is my last layer not sticking to the bed?")]),
        ("How do I level the bed on an Ender 3?", [("ver", "How do I level the bed on an Ender 5?")]),
        ("Is a 0.4 mm nozzle good for miniatures?", [("num", "Is a 0.2 mm nozzle good for miniatures?")]),
        ("How do I stop stringing with TPU filament?", [("sib", "How do I stop stringing with PLA filament?")]),
        ("Should I dry my filament before printing?", [("sib", "Should I dry my resin before printing?")]),
    ],
    "birds": [
        ("What should I put in a bird feeder in winter?", [("sib", "What should I put in a bird feeder in summer?")]),
        ("How do I keep squirrels away from my bird feeder?", [("sib", "How do I keep pigeons away from my bird feeder?")]),
        ("When do robins lay their eggs?", [("sib", "When do crows lay their eggs?")]),
        ("Is it okay to feed bread to ducks?", [("sib", "Is it okay to feed oats to ducks?")]),
        ("Are 8x42 binoculars good for birdwatching?", [("num", "Are 10x42 binoculars good for birdwatching?")]),
        ("How can I tell a male cardinal from a female?", [("sib", "How can I tell a male robin from a female?")]),
    ],
    "tea": [
        ("How long should I steep green tea?", [("sib", "How long should I steep black tea?")]),
        ("What water temperature is best for oolong?", [("sib", "What water temperature is best for matcha?")]),
        ("Does green tea have more caffeine than coffee?", [("ant", "Does green tea have less caffeine than coffee?")]),
        ("Can I reuse loose leaf tea?", [("sib", "Can I reuse tea bags?")]),
        ("How much matcha should I use per cup?", [("unit", "How much matcha should I use per liter?")]),
        ("Is chamomile tea safe during pregnancy?", [("sib", "Is peppermint tea safe during pregnancy?")]),
    ],
    "dental": [
        ("How often should I replace my toothbrush?", [("sib", "How often should I clean my toothbrush?")]),
        ("Is it normal for gums to bleed when flossing?", [("sib", "Is it normal for gums to bleed when brushing?")]),
        ("How long after a filling can I eat?", [("sib", "How long after an extraction can I eat?")]),
        ("Do I need a crown after a root canal?", [("sib", "Do I need a crown after a filling?")]),
        ("Should I brush my teeth before breakfast?", [("ant", "Should I brush my teeth after breakfast?")]),
        ("Can whitening strips damage enamel?", [("sib", "Can whitening toothpaste damage enamel?")]),
    ],
    # One small change, often one letter: what a spelling fix must never merge (two topics, one per split).
    "mixed-a": [
        ("How do I remove a tick from my cat?", [("letter", "How do I remove a tick from my rat?"), ("letter", "How do I remove a tick from my car?")]),
        ("How do I change a flat tire?", [("letter", "How do I change a flat tile?")]),
        ("What is the best way to store rice?", [("letter", "What is the best way to store ice?")]),
        ("Can I freeze cooked beans?", [("letter", "Can I freeze cooked beets?")]),
        ("Can I take 2 aspirin a day?", [("num", "Can I take 3 aspirin a day?")]),
        ("Why can I hear my heartbeat in my ear?", [("neg", "Why can't I hear my heartbeat in my ear?")]),
        ("Is Python 3.12 faster than Python 3.11?", [("ver", "Is Python 3.13 faster than Python 3.11?")]),
        ("How many ml are in a tablespoon?", [("sib", "How many ml are in a teaspoon?")]),
        ("Is 5 mg of melatonin too much?", [("unit", "Is 5 g of melatonin too much?")]),
    ],
    "mixed-b": [
        ("What does HLOOKUP do in Excel?", [("letter", "What does VLOOKUP do in Excel?")]),
        ("Is 100 Mbps fast enough for 4K streaming?", [("case", "Is 100 MBps fast enough for 4K streaming?"), ("ver", "Is 100 Mbps fast enough for 8K streaming?")]),
        ("What is the difference between IPv4 and NAT?", [("ver", "What is the difference between IPv6 and NAT?")]),
        ("Does the iPhone 15 have a USB-C port?", [("ver", "Does the iPhone 14 have a USB-C port?")]),
        ("Is methanol safe to drink?", [("letter", "Is ethanol safe to drink?")]),
        ("What is a good gift for a 3 year old?", [("num", "What is a good gift for a 13 year old?")]),
        ("How do I boil an egg?", [("letter", "How do I broil an egg?")]),
        ("Can I use baking soda instead of baking powder?", [("dir", "Can I use baking powder instead of baking soda?")]),
        ("Is it safe to eat raw cookie dough?", [("sib", "Is it safe to eat raw pizza dough?")]),
        ("What is the boiling point of water in Kelvin?", [("unit", "What is the boiling point of water in Fahrenheit?")]),
        ("How do I convert kg to lbs?", [("dir", "How do I convert lbs to kg?")]),
        ("Is a 65W charger safe for my laptop?", [("num", "Is a 45W charger safe for my laptop?")]),
        ("How do I add a row in Google Sheets?", [("letter", "How do I add a cow in Google Sheets?"), ("sib", "How do I add a column in Google Sheets?")]),
        ("What causes hiccups in babies?", [("letter", "What causes hiccups in rabbits?")]),
        ("How long should I wait to swim after eating?", [("letter", "How long should I wait to sin after eating?")]),
    ],
}

# --- noise ----------------------------------------------------------------------------------------

_KEYS = ["qwertyuiop", "asdfghjkl", "zxcvbnm"]
_NEAR = {}
for r, row in enumerate(_KEYS):
    for c, ch in enumerate(row):
        near = [row[c + d] for d in (-1, 1) if 0 <= c + d < len(row)]
        near += [_KEYS[r + d][c] for d in (-1, 1) if 0 <= r + d < 3 and c < len(_KEYS[r + d])]
        _NEAR[ch] = "".join(near)


def _typo_word(w: str, rng: random.Random) -> str:
    """One slip of the fingers in a word: a letter dropped, doubled, swapped with the next, or a neighbouring key."""
    for _ in range(10):
        i = rng.randrange(1, len(w) - 1) if len(w) > 3 else 1
        op = rng.choice(["drop", "drop", "swap", "swap", "double", "near", "insert"])
        if op == "drop":
            new = w[:i] + w[i + 1:]
        elif op == "swap":
            new = w[:i] + w[i + 1] + w[i] + w[i + 2:] if i + 1 < len(w) else w
        elif op == "double":
            new = w[:i] + w[i] + w[i:]
        elif op == "near":
            ch = w[i].lower()
            new = w[:i] + rng.choice(_NEAR[ch]) + w[i + 1:] if ch in _NEAR else w
        else:
            ch = w[i].lower()
            new = w[:i] + rng.choice(_NEAR[ch]) + w[i:] if ch in _NEAR else w
        if new != w:
            return new
    return w


_WORD = re.compile(r"[A-Za-z]+")


def typos(q: str, rng: random.Random, n: int = 1, keep: frozenset[str] = frozenset()) -> str | None:
    """`n` words of four letters or more (not all capitals, not in `keep`) get one slip each."""
    words = [m for m in _WORD.finditer(q) if len(m.group()) >= 4 and not m.group().isupper() and m.group().lower() not in keep]
    if len(words) < n:
        return None
    chosen = sorted(rng.sample(words, n), key=lambda m: m.start(), reverse=True)
    for m in chosen:
        q = q[:m.start()] + _typo_word(m.group(), rng) + q[m.end():]
    return q


def no_punctuation(q: str, rng: random.Random) -> str:
    out = q.lower() if rng.random() < 0.7 else q
    return re.sub(r"[?!.,]+$", "", out).replace(",", "")


def caps(q: str, rng: random.Random) -> str:
    return q.upper() if rng.random() < 0.7 else q.upper().rstrip("?") + "???"


_CONTRACT = [(r"\bdo not\b", "don't"), (r"\bdoes not\b", "doesn't"), (r"\bis not\b", "isn't"), (r"\bcan not\b|\bcannot\b", "can't"),
             (r"\bWhat is\b", "What's"), (r"\bwhat is\b", "what's"), (r"\bit is\b", "it's"), (r"\bIt is\b", "It's"),
             (r"\bI am\b", "I'm"), (r"\bHow is\b", "How's"), (r"\bthat is\b", "that's"), (r"\bthey are\b", "they're")]
_EXPAND = [(r"\bdon't\b", "do not"), (r"\bcan't\b", "cannot"), (r"\bI'm\b", "I am"), (r"\bWhat's\b", "What is"), (r"\bisn't\b", "is not")]
_APOSTROPHE = [(r"\bdon't\b", "dont"), (r"\bdoesn't\b", "doesnt"), (r"\bisn't\b", "isnt"), (r"\bcan't\b", "cant"),
               (r"\bI'm\b", "im"), (r"\bWhat's\b", "whats"), (r"\bwhat's\b", "whats"), (r"\bwon't\b", "wont"),
               (r"\bit's\b", "its"), (r"\bIt's\b", "its"), (r"\bthey're\b", "theyre"), (r"\bdidn't\b", "didnt")]


def contractions(q: str, rng: random.Random) -> str | None:
    """Contract, expand, and (half the time) drop the apostrophes as people typing fast do."""
    out = q
    for p, r in _CONTRACT:
        out = re.sub(p, r, out)
    if out == q:
        for p, r in _EXPAND:
            out = re.sub(p, r, out)
    if rng.random() < 0.6:
        for p, r in _APOSTROPHE:
            out = re.sub(p, r, out)
    return out if out != q else None


_CHAT = [(r"\byou\b", "u"), (r"\byour\b", "ur"), (r"\bare\b", "r"), (r"\bplease\b", "pls"), (r"\bwith\b", "w/"),
         (r"\bwithout\b", "w/o"), (r"\bbefore\b", "b4"), (r"\bbecause\b", "bc"), (r"\bpeople\b", "ppl"),
         (r"\btomorrow\b", "tmrw"), (r"\bmessage\b", "msg"), (r"\babout\b", "abt"), (r"\bthanks\b", "thx"), (r"\bokay\b", "ok"),
         (r"\bthrough\b", "thru"), (r"\bright now\b", "rn"), (r"\bminutes\b", "mins"), (r"\bsomeone\b", "some1")]
_CHAT_TAILS = [" pls", " plz", " thx", " ty", " tia", " pls help", " thx in advance", " asap pls"]


def chat(q: str, rng: random.Random) -> str:
    """Text-message shorthand, lower case, often without the question mark, and a short tail."""
    out = q[0].lower() + q[1:] if rng.random() < 0.8 else q
    for p, r in _CHAT:
        out = re.sub(p, r, out)
    if rng.random() < 0.5:
        out = out.rstrip("?")
    return out + rng.choice(_CHAT_TAILS) if rng.random() < 0.7 else out


_OPENERS = ["Hey, quick question: {q}", "Hi all, {ql}", "Hello! {q}", "Sorry if this is a dumb question, but {ql}",
            "Can anyone help? {q}", "Ok so {ql}", "Hey there! {q}", "Good morning, {ql}", "Question: {q}",
            "Hi, I have a question. {q}", "Random question, {ql}", "Hey everyone, {ql}"]
_CLOSERS = ["{q} Thanks in advance!", "{q} Any help appreciated.", "{q} Cheers", "{q} Thanks so much!!", "{q} TIA",
            "{q} Thank you!", "{q}\n\nThanks,\nMaria", "{q} - Tom", "{q} Many thanks.", "{q} Appreciate it!"]


def filler(q: str, rng: random.Random) -> str:
    ql = q[0].lower() + q[1:] if not q.split()[0].isupper() and q[:2] != "I " else q
    return rng.choice(_OPENERS).format(q=q, ql=ql)


def signoff(q: str, rng: random.Random) -> str:
    return rng.choice(_CLOSERS).format(q=q)


def greeting_and_signoff(q: str, rng: random.Random) -> str:
    return signoff(filler(q, rng), rng)


_MARKUP = ["**{q}**", "\"{q}\"", "'{q}'", "  {q}  ", "{q}??", "{q} ?", "Q: {q}", "{q}\n", "> {q}", "{q} 🙏",
           "{q} :)", "{q}...", "`{q}`", "{q}!!", "# {q}", "- {q}"]


def markup(q: str, rng: random.Random) -> str:
    out = rng.choice(_MARKUP).format(q=q)
    if rng.random() < 0.3:
        out = out.replace(" ", "  ", 1)
    return out


_US_UK = {"color": "colour", "favorite": "favourite", "center": "centre", "organize": "organise", "analyze": "analyse",
          "canceled": "cancelled", "cancelled": "canceled", "traveling": "travelling", "license": "licence",
          "gray": "grey", "liter": "litre", "meter": "metre", "aluminum": "aluminium", "flavor": "flavour",
          "catalog": "catalogue", "defense": "defence", "tire": "tyre", "mold": "mould", "fiber": "fibre",
          "theater": "theatre", "optimize": "optimise", "customize": "customise", "apologize": "apologise", "sweaters": "jumpers"}


def spelling(q: str, rng: random.Random) -> str | None:
    out = q
    for us, uk in _US_UK.items():
        if us == "sweaters":
            continue  # a regional word, not a spelling
        out = re.sub(rf"\b{us}\b", uk, out)
    return out if out != q else None


_HYPHEN = [("e-mail", "email"), ("email", "e-mail"), ("emails", "e-mails"), ("Wi-Fi", "wifi"), ("pop-ups", "popups"),
           ("read-only", "read only"), ("set up", "setup"), ("online", "on-line"), ("startup", "start-up"),
           ("toothbrush", "tooth brush"), ("birdwatching", "bird watching"), ("JavaScript", "Javascript"),
           ("Dockerfile", "docker file"), ("USB-C", "USB C"), ("loose leaf", "loose-leaf"), ("Z-Wave", "Z Wave"),
           ("bathroom", "bath room"), ("website", "web site"), ("ENTRYPOINT", "entry point")]


def hyphens(q: str, rng: random.Random) -> str | None:
    for a, b in _HYPHEN:
        if re.search(rf"\b{re.escape(a)}\b", q):
            return re.sub(rf"\b{re.escape(a)}\b", b, q, count=1)
    return None


_NUM = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]


def digits(q: str, rng: random.Random) -> str | None:
    """A small whole number before a word written out ("2 aspirin" / "two aspirin"), or the other way round."""
    out = re.sub(r"(?<![\w.])(\d{1,2})(?= [a-z]{3,})", lambda m: _NUM[int(m.group(1))] if int(m.group(1)) < len(_NUM) else m.group(1), q)
    if out == q:
        out = re.sub(r"\b(" + "|".join(_NUM[2:]) + r")\b(?= [a-z])", lambda m: str(_NUM.index(m.group(1))), q)
    return out if out != q else None


def messy(q: str, rng: random.Random) -> str | None:
    """Several at once: lower case, shorthand, no question mark, one typo."""
    t = typos(q, rng)
    return chat(no_punctuation(t, rng), rng) if t else None


NOISE = {
    "typo": lambda q, rng: typos(q, rng, 1),
    "typo (second)": lambda q, rng: typos(q, rng, 1),
    "two typos": lambda q, rng: typos(q, rng, 2),
    "no punctuation": no_punctuation,
    "all caps": caps,
    "contractions": contractions,
    "chat": chat,
    "filler": filler,
    "sign-off": signoff,
    "greeting + sign-off": greeting_and_signoff,
    "markup": markup,
    "spelling": spelling,
    "hyphenation": hyphens,
    "digits": digits,
    "messy": messy,
}
# What a trap may be asked with (its changed word is never touched): the noise of a near-repeat.
TRAP_NOISE = ["no punctuation", "filler", "sign-off", "chat", "markup", "contractions", "typo"]


def build() -> list[dict]:
    topics = sorted(BASES)
    split_of = {t: ("dev-tune" if i % 2 == 0 else "dev-check") for i, t in enumerate(topics)}
    pairs: list[dict] = []
    for topic in topics:
        for n, (q, traps) in enumerate(BASES[topic]):
            rng = random.Random(f"near:{topic}:{n}:{q}")
            group = f"{topic}/{n}"

            def add(a: str, b: str, label: str, kind: str, topic: str = topic, group: str = group) -> None:
                pairs.append({"a": a, "b": b, "label": label, "kind": kind, "topic": topic, "group": group,
                              "split": split_of[topic]})

            seen = {q}
            for kind, make in NOISE.items():
                v = make(q, rng)
                if v is None or v in seen:
                    continue
                seen.add(v)
                # A quarter of the time the noisy wording came first and is the one cached.
                add(*((v, q) if rng.random() < 0.25 else (q, v)), "same", kind)
            for kind, trap in traps:
                add(q, trap, "different", kind)
                changed = frozenset(w.lower() for w in _WORD.findall(trap)) - frozenset(w.lower() for w in _WORD.findall(q))
                changed |= frozenset(w.lower() for w in _WORD.findall(q)) - frozenset(w.lower() for w in _WORD.findall(trap))
                style = rng.choice(TRAP_NOISE)
                noisy = typos(trap, rng, 1, keep=changed) if style == "typo" else NOISE[style](trap, rng)
                if noisy and noisy != trap and (kind != "case" or style not in ("no punctuation", "chat")):
                    add(q, noisy, "different", kind)
                    # and the noisy trap cached, the clean question asked
                    if rng.random() < 0.3:
                        add(noisy, q, "different", kind)
    return pairs


def main() -> None:
    from collections import Counter

    pairs = build()
    OUT.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs))
    print(f"{len(pairs)} pairs -> {OUT}")
    for split in ("dev-tune", "dev-check"):
        sub = [p for p in pairs if p["split"] == split]
        print(f"{split}: {len(sub)} pairs, {sum(p['label'] == 'same' for p in sub)} same, "
              f"{sum(p['label'] == 'different' for p in sub)} different; topics {sorted({p['topic'] for p in sub})}")
    print(dict(Counter((p["label"], p["kind"]) for p in pairs)))


if __name__ == "__main__":
    main()
