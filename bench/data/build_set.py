"""Build the semantic-cache labelled set by construction: bench/data/semantic_set.jsonl.

Every pair is (a, b): `a` was cached, `b` is asked. `label` is "same" (a true repeat: the cached
answer is right for b) or "different" (a trap: it is wrong). Sources:

- semantic_bases.txt: base questions with hand-written paraphrases and marked one-word traps;
- mechanical true repeats of each base: case, typos, politeness, question frames, numbers written
  out, British/American spelling, reordering;
- multi-turn pairs: the same follow-up after the same or a different earlier conversation.

`split` is decided by topic (sorted topics alternate tune/test), so no base question, paraphrase or
trap of a test topic is seen while tuning. Deterministic: the same files give the same set.

    python bench/data/build_set.py
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASES = HERE / "semantic_bases.txt"
OUT = HERE / "semantic_set.jsonl"

_BRACKET = re.compile(r"\[([^\]|]*)\|([^\]:]*):(\w+)\]")
_NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]
_US_UK = {"color": "colour", "favorite": "favourite", "center": "centre", "organize": "organise",
          "optimize": "optimise", "analyze": "analyse", "canceling": "cancelling", "traveling": "travelling",
          "license": "licence", "defense": "defence", "gray": "grey", "tires": "tyres", "mold": "mould",
          "liter": "litre", "meter": "metre", "kilometers": "kilometres", "apologize": "apologise"}
_POLITE = ["Please tell me: {q}", "Quick question: {q}", "{q} Thanks!", "Hi! {q}", "{q} Thank you.",
           "Can you tell me this: {q}", "Hey, {ql}", "I was wondering: {ql}"]
_FRAMES = [("How do I ", ["How can I ", "What's the way to ", "What are the steps to ", "How should I "]),
           ("What is ", ["What's "]), ("How can I ", ["How do I ", "What's the way to "]),
           ("Is it ", ["Would it be "]), ("Can I ", ["Am I able to ", "Is it possible to "]),
           ("Should I ", ["Is it wise to "]), ("What are ", ["Which are "])]

# Multi-turn: (first turn A, first turn B that changes the answer, follow-up, paraphrased follow-up).
_CONVERSATIONS = {
    "travel": [("I'm flying to Tokyo next week.", "I'm flying to Oslo next week.", "What should I pack?", "What do I need to pack?"),
               ("I booked a hotel in Rome.", "I booked a hostel in Rome.", "Is breakfast usually included?", "Is breakfast normally included?")],
    "cooking": [("I'm making bread with whole wheat flour.", "I'm making bread with rye flour.", "How long should the dough rise?", "How long does the dough need to rise?"),
                ("I have a cast iron pan.", "I have a non-stick pan.", "Can I put it in the oven?", "Is it ok to put it in the oven?")],
    "python": [("I'm using Python 3.12.", "I'm using Python 2.7.", "How do I print without a newline?", "How can I print without a newline?"),
               ("My script reads a 2 GB file.", "My script reads a 2 KB file.", "Why is it so slow?", "Why is it that slow?")],
    "pets": [("My dog is 12 years old.", "My dog is 12 weeks old.", "How much should she eat?", "How much food should she eat?"),
             ("I have a parrot.", "I have a hamster.", "Can it eat avocado?", "Is avocado ok for it to eat?")],
    "health": [("I'm pregnant.", "I'm not pregnant.", "Can I take ibuprofen?", "Is it ok to take ibuprofen?"),
               ("My son is 4.", "My son is 14.", "How much sleep does he need?", "How many hours of sleep does he need?")],
    "finance": [("I live in Germany.", "I live in Canada.", "How is my pension taxed?", "How does my pension get taxed?"),
                ("I have 5000 dollars of credit card debt.", "I have 5000 dollars in savings.", "What should I do first?", "What should I do first?")],
    "git": [("I already pushed the commit.", "I haven't pushed the commit yet.", "How do I undo it?", "How can I undo it?"),
            ("I'm on the main branch.", "I'm on a feature branch.", "How do I rebase?", "How can I rebase?")],
    "phone": [("I have an iPhone 15.", "I have a Pixel 8.", "How do I record my screen?", "How can I record the screen?"),
              ("My phone is on iOS 17.", "My phone is on Android 14.", "How do I turn off autocorrect?", "How can I disable autocorrect?")],
    "jobs": [("I work part-time.", "I work full-time.", "Am I entitled to paid holidays?", "Do I get paid holidays?"),
             ("I'm on probation.", "I'm a permanent employee.", "How much notice do I have to give?", "How much notice must I give?")],
    "housing": [("I rent my apartment.", "I own my apartment.", "Who pays for a broken boiler?", "Who pays to fix a broken boiler?"),
                ("I live in New York.", "I live in Texas.", "Can my landlord enter without notice?", "Is my landlord allowed to enter without notice?")],
    "cars": [("My car is a diesel.", "My car is electric.", "How often does it need servicing?", "How often should it be serviced?"),
             ("The light is flashing.", "The light is steady.", "Is it safe to keep driving?", "Is it safe to continue driving?")],
    "school": [("I'm an international student.", "I'm a domestic student.", "Can I work while studying?", "Am I allowed to work while studying?"),
               ("I failed the exam once.", "I failed the exam twice.", "Can I retake it?", "Am I able to retake it?")],
    "tax": [("I'm self-employed.", "I'm a salaried employee.", "Can I deduct my laptop?", "Is my laptop deductible?"),
            ("I moved abroad in March.", "I moved abroad in December.", "Where do I file taxes this year?", "Where should I file taxes this year?")],
    "garden": [("My garden is in full shade.", "My garden is in full sun.", "Which vegetables grow best?", "What vegetables grow best?"),
               ("The soil here is clay.", "The soil here is sandy.", "How often should I water?", "How frequently should I water?")],
    "security": [("I use a password manager.", "I don't use a password manager.", "Is my account safe?", "Is my account secure?"),
                 ("My laptop runs Windows.", "My laptop runs Linux.", "Do I need antivirus?", "Do I need an antivirus?")],
    "db": [("The table has 10 rows.", "The table has 10 million rows.", "Should I add an index?", "Should I create an index?"),
           ("I'm on PostgreSQL.", "I'm on SQLite.", "How do I rename a column?", "How can I rename a column?")],
    "energy": [("My house has gas heating.", "My house has a heat pump.", "What temperature should I set at night?", "What temperature should I set overnight?")],
    "space": [("I'm in Australia.", "I'm in Canada.", "Can I see the eclipse tonight?", "Will I be able to see the eclipse tonight?")],
}


def _split(line: str) -> list[str]:
    """topic | question (brackets may hold |) | paraphrases."""
    topic, rest = line.split("|", 1)
    depth, cut = 0, None
    for i, ch in enumerate(rest):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "|" and depth == 0:
            cut = i
            break
    question = rest[:cut] if cut is not None else rest
    paraphrases = [p.strip() for p in rest[cut + 1:].split("||")] if cut is not None else []
    return [topic.strip(), question.strip(), *[p for p in paraphrases if p]]


def render(question: str, pick: int | None = None, alt: bool = False) -> str:
    """The question with every bracket's base value, except bracket `pick` set to its alternative."""
    n = iter(range(1000))

    def sub(m: re.Match) -> str:
        i = next(n)
        return m.group(2) if alt and i == pick else m.group(1)

    return re.sub(r"\s+", " ", _BRACKET.sub(sub, question)).replace(" ?", "?").strip()


def typo(q: str, rng: random.Random) -> str | None:
    words = [m for m in re.finditer(r"[A-Za-z]{6,}", q)]
    if not words:
        return None
    m = rng.choice(words)
    w = m.group()
    i = rng.randrange(1, len(w) - 2)
    if rng.random() < 0.5:
        new = w[:i] + w[i + 1] + w[i] + w[i + 2:]  # swap two letters
    else:
        new = w[:i] + w[i + 1:]  # drop a letter
    return q[:m.start()] + new + q[m.end():] if new != w else None


def numbers(q: str) -> str | None:
    def to_words(m):
        n = int(m.group())
        return _NUMBER_WORDS[n] if n <= 20 else m.group()

    out = re.sub(r"(?<![\d.:])\b\d{1,2}\b(?![\d.:])", to_words, q)
    out = re.sub(r"(\d) percent\b", r"\1%", out) if out == q else out
    return out if out != q else None


def spelling(q: str) -> str | None:
    out = q
    for us, uk in _US_UK.items():
        out = re.sub(rf"\b{us}\b", uk, out)
        if out == q:
            out = re.sub(rf"\b{uk}\b", us, out)
    return out if out != q else None


def reframe(q: str, rng: random.Random) -> str | None:
    for start, alts in _FRAMES:
        if q.startswith(start):
            return rng.choice(alts) + q[len(start):]
    return None


def reorder(q: str) -> str | None:
    m = re.match(r"^(.*) (in|on|for|with) ((?:[A-Z]\w*|git|a Mac|Windows)(?: [\w-]+)?)\?$", q)
    if not m or len(m.group(1).split()) < 3:
        return None
    body = m.group(1)
    return f"{m.group(2).capitalize()} {m.group(3)}, {body[0].lower() + body[1:]}?"


def polite(q: str, rng: random.Random) -> str:
    return rng.choice(_POLITE).format(q=q, ql=q[0].lower() + q[1:])


def case(q: str, rng: random.Random) -> str:
    return q.lower() if rng.random() < 0.7 else q.upper()


def build() -> list[dict]:
    lines = [l for l in BASES.read_text().splitlines() if l.strip() and not l.startswith("#")]
    topics = sorted({_split(l)[0] for l in lines} | set(_CONVERSATIONS))
    split_of = {t: ("tune" if i % 2 == 0 else "test") for i, t in enumerate(topics)}
    pairs: list[dict] = []

    def add(topic, group, a, b, label, kind, **extra):
        if a != b or label == "same":
            pairs.append({"a": a, "b": b, "label": label, "kind": kind, "topic": topic, "group": group,
                          "split": split_of[topic], **extra})

    for n, line in enumerate(lines):
        topic, question, *paraphrases = _split(line)
        rng = random.Random(f"{n}:{question}")
        base = render(question)
        group = f"{topic}/{n}"
        for p in paraphrases:
            add(topic, group, base, p, "same", "paraphrase")
        variants = [("case", case(base, rng)), ("typo", typo(base, rng)), ("politeness", polite(base, rng)),
                    ("reframe", reframe(base, rng)), ("numbers", numbers(base)), ("spelling", spelling(base)),
                    ("reorder", reorder(base))]
        for kind, v in variants:
            if v and v != base:
                add(topic, group, base, v, "same", kind)
        for i, m in enumerate(_BRACKET.finditer(question)):
            kind = m.group(3)
            trap = render(question, i, alt=True)
            add(topic, group, base, trap, "different", kind)
            # The same trap asked in other words too: a verifier may not assume "any change is a trap".
            if paraphrases and rng.random() < 0.5:
                add(topic, group, paraphrases[0], trap, "different", kind)
            styled = case(trap, rng) if rng.random() < 0.5 else polite(trap, rng)
            add(topic, group, base, styled, "different", kind)

    for topic, convs in _CONVERSATIONS.items():
        for n, (first_a, first_b, follow, follow_para) in enumerate(convs):
            rng = random.Random(f"conv:{topic}:{n}")
            group = f"{topic}/conv{n}"
            ctx_a = [first_a, "Sure, happy to help."]
            ctx_b = [first_b, "Sure, happy to help."]
            for kind, b in (("multi-turn paraphrase", follow_para), ("multi-turn case", case(follow, rng)),
                            ("multi-turn politeness", polite(follow, rng))):
                add(topic, group, follow, b, "same", kind, context_a=ctx_a, context_b=ctx_a)
            add(topic, group, follow, follow, "different", "multi-turn context", context_a=ctx_a, context_b=ctx_b)
            add(topic, group, follow, follow_para, "different", "multi-turn context", context_a=ctx_a, context_b=ctx_b)
    return pairs


def main() -> None:
    pairs = build()
    OUT.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs))
    from collections import Counter

    print(f"{len(pairs)} pairs -> {OUT}")
    for split in ("tune", "test"):
        sub = [p for p in pairs if p["split"] == split]
        print(f"{split}: {len(sub)} pairs, {sum(p['label'] == 'same' for p in sub)} same, "
              f"{sum(p['label'] == 'different' for p in sub)} different; topics "
              f"{sorted({p['topic'] for p in sub})}")
    print(dict(Counter(p["kind"] for p in pairs)))


if __name__ == "__main__":
    main()
