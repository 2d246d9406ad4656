"""A development set of multi-turn conversations for choosing the history rules (issue 25, "Conversations").

Written by hand by helper p25c on 2026-12-05, on topics that appear in neither semantic_bases.txt nor
independent_set.py (beekeeping, woodworking, skincare, wine, podcasting, plumbing, birdwatching,
video editing, weddings, kayaking, pottery, fishing), before any history rule was chosen; the history
rules in app/cache/history.py were chosen on this set and the tune split of semantic_set.jsonl, so
its figures are tuning figures, not evidence. The independent conversation-set is only reported.

Each conversation: one earlier exchange (a user statement, the assistant's reply) and a follow-up.
The assistant's replies are what a chat model says (they often restate the user's fact), so a trap
that changes the user's fact changes the reply with it where the reply restated it ("echo"), and
keeps it where the reply was generic. Pairs (a, b), `a` cached, `b` asked; `context_a`/`context_b`
are the earlier turns, alternating user, assistant:

- true repeats: the follow-up reworded; the user's statement reworded; the assistant's reply
  reworded (the model answered a reworded first turn afresh); several of those at once;
- traps: the user's statement with another fact (`history:num|ent|sib|neg|unit|qual`), the
  assistant's reply with another fact (`assistant:KIND`: it said something else the follow-up
  builds on), the follow-up with another fact (`follow-up:KIND`).

    python bench/data/conversation_dev.py      # writes conversation_dev.jsonl beside this file
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "conversation_dev.jsonl"

# (topic, user statement, assistant reply, follow-up,
#  user rewordings, reply rewordings, follow-up rewordings,
#  user traps [(statement, reply or None to keep it, kind)], reply traps [(reply, kind)], follow-up traps [(q, kind)])
Conv = tuple[str, str, str, str, list[str], list[str], list[str], list[tuple[str, str | None, str]],
             list[tuple[str, str]], list[tuple[str, str]]]

CONVERSATIONS: list[Conv] = [
    ("beekeeping", "I keep two hives in my backyard.", "Two backyard hives is a nice setup. What would you like to know?",
     "How often should I inspect them?",
     ["I have two beehives in my back yard.", "I've got two hives in the backyard."],
     ["Nice, two hives in the backyard is a good setup. What can I help with?"],
     ["How frequently do I need to inspect them?", "How often do they need inspecting?"],
     [("I keep twenty hives in my backyard.", "Twenty backyard hives is a big setup. What would you like to know?", "history:num"),
      ("I keep two hives on my rooftop.", "Two rooftop hives is a nice setup. What would you like to know?", "history:sib"),
      ("I keep two wasp nests in my backyard.", None, "history:ent")],
     [("Two backyard hives is a lot for a beginner. What would you like to know?", "assistant:qual")],
     [("How often should I feed them?", "follow-up:sib"), ("How often should I harvest them?", "follow-up:sib")]),
    ("beekeeping", "My bees are Italian honeybees.", "Italian honeybees are gentle and productive.",
     "Do they need extra feeding in winter?",
     ["I keep Italian honey bees.", "The bees I have are Italian honeybees."],
     ["Italian honeybees are known for being gentle and productive."],
     ["Should I give them extra food over the winter?", "Do they need to be fed more during winter?"],
     [("My bees are Carniolan honeybees.", "Carniolan honeybees are gentle and thrifty.", "history:ent"),
      ("My bees are Africanized honeybees.", None, "history:ent")],
     [("Italian honeybees are gentle but eat a lot in winter.", "assistant:qual")],
     [("Do they need extra feeding in summer?", "follow-up:sib"), ("Do they need extra water in winter?", "follow-up:sib")]),
    ("woodworking", "I'm building a bookshelf out of oak.", "Oak is a great choice for a sturdy bookshelf.",
     "What finish should I use?",
     ["I am making a bookshelf from oak.", "I'm building an oak bookshelf."],
     ["Oak is an excellent choice for a strong bookshelf."],
     ["Which finish would you recommend?", "What kind of finish should I put on it?"],
     [("I'm building a bookshelf out of pine.", "Pine is a fine choice for a light bookshelf.", "history:sib"),
      ("I'm building a cutting board out of oak.", "Oak is a great choice for a cutting board.", "history:ent"),
      ("I'm building an outdoor bookshelf out of oak.", None, "history:qual")],
     [("Oak is a poor choice for a bookshelf that gets wet.", "assistant:neg")],
     [("What glue should I use?", "follow-up:sib"), ("What screws should I use?", "follow-up:sib")]),
    ("woodworking", "My table saw blade is 10 inches.", "A 10-inch blade is the most common size.",
     "How deep can it cut?",
     ["I have a 10 inch table saw blade.", "The blade on my table saw is ten inches."],
     ["Ten-inch blades are the most common size."],
     ["What's its maximum cutting depth?", "How deep a cut can it make?"],
     [("My table saw blade is 12 inches.", "A 12-inch blade is a large size.", "history:num"),
      ("My table saw blade is 10 centimeters.", None, "history:unit"),
      ("My miter saw blade is 10 inches.", "A 10-inch miter saw blade is common.", "history:sib")],
     [("A 10-inch blade is the most common size, but yours is worn.", "assistant:qual")],
     [("How fast does it spin?", "follow-up:sib"), ("How wide can it cut?", "follow-up:sib")]),
    ("skincare", "I have oily skin.", "Got it, oily skin.",
     "Which moisturizer should I use?",
     ["My skin is oily.", "My skin type is oily."],
     ["Okay, you have oily skin."],
     ["What moisturizer do you recommend?", "Which moisturiser is best for me?"],
     [("I have dry skin.", "Got it, dry skin.", "history:sib"),
      ("I don't have oily skin.", None, "history:neg"),
      ("I have oily, acne-prone skin.", None, "history:qual")],
     [("Got it, dry skin.", "assistant:sib")],
     [("Which cleanser should I use?", "follow-up:sib"), ("Which sunscreen should I use?", "follow-up:sib")]),
    ("skincare", "I'm 45 years old and use retinol every night.", "Nightly retinol at 45 is a common routine.",
     "Can I also use vitamin C?",
     ["I am 45 and I use retinol nightly.", "I'm forty-five and I put on retinol every night."],
     ["Using retinol every night at 45 is a common routine."],
     ["Is it okay to use vitamin C as well?", "Can I add vitamin C too?"],
     [("I'm 15 years old and use retinol every night.", "Nightly retinol at 15 is unusual.", "history:num"),
      ("I'm 45 years old and use retinol once a week.", "Weekly retinol at 45 is a gentle routine.", "history:qual"),
      ("I'm 45 years old and use benzoyl peroxide every night.", None, "history:ent")],
     [("Nightly retinol at 45 is too much for most skin.", "assistant:qual")],
     [("Can I also use glycolic acid?", "follow-up:ent"), ("Can I also use niacinamide?", "follow-up:ent")]),
    ("wine", "I'm serving grilled salmon for dinner.", "Grilled salmon pairs well with several wines.",
     "Which wine goes best with it?",
     ["I'm making grilled salmon for dinner tonight.", "For dinner I'm serving grilled salmon."],
     ["Several wines pair nicely with grilled salmon."],
     ["What wine would pair best with it?", "What's the best wine to go with it?"],
     [("I'm serving grilled steak for dinner.", "Grilled steak pairs well with several wines.", "history:ent"),
      ("I'm serving raw salmon for dinner.", "Raw salmon pairs well with several wines.", "history:sib"),
      ("I'm serving grilled salmon for breakfast.", None, "history:sib")],
     [("Grilled salmon pairs best with beer, not wine.", "assistant:neg")],
     [("Which cheese goes best with it?", "follow-up:sib"), ("Which beer goes best with it?", "follow-up:sib")]),
    ("wine", "I have a bottle of 2015 Barolo.", "A 2015 Barolo is a lovely bottle.",
     "How long should I decant it?",
     ["I've got a 2015 Barolo bottle.", "I own a bottle of Barolo from 2015."],
     ["That 2015 Barolo is a lovely wine."],
     ["For how long should I decant it?", "How much time does it need in the decanter?"],
     [("I have a bottle of 2021 Barolo.", "A 2021 Barolo is a young bottle.", "history:num"),
      ("I have a bottle of 2015 Chianti.", "A 2015 Chianti is a lovely bottle.", "history:ent"),
      ("I have a magnum of 2015 Barolo.", None, "history:unit")],
     [("A 2015 Barolo is a lovely bottle, but this one is corked.", "assistant:qual")],
     [("How long should I chill it?", "follow-up:sib"), ("How long can I keep it?", "follow-up:sib")]),
    ("podcasting", "I record my podcast with a USB microphone.", "A USB microphone is an easy way to start.",
     "How do I reduce background noise?",
     ["My podcast is recorded with a USB mic.", "I use a USB microphone to record my podcast."],
     ["USB microphones are an easy way to get started."],
     ["How can I cut down on background noise?", "What can I do to reduce the background noise?"],
     [("I record my podcast with an XLR microphone.", "An XLR microphone gives you more control.", "history:ent"),
      ("I record my podcast with my phone.", "A phone is an easy way to start.", "history:sib"),
      ("I record my podcast with a USB microphone outdoors.", None, "history:qual")],
     [("A USB microphone picks up a lot of room echo.", "assistant:qual")],
     [("How do I reduce echo?", "follow-up:sib"), ("How do I add background music?", "follow-up:sib")]),
    ("podcasting", "My episodes are about 90 minutes long.", "Ninety-minute episodes are on the long side.",
     "Should I split them into two parts?",
     ["Each episode runs around 90 minutes.", "My episodes last about an hour and a half."],
     ["Episodes of 90 minutes are fairly long."],
     ["Is it better to break them into two parts?", "Would splitting them in two be a good idea?"],
     [("My episodes are about 20 minutes long.", "Twenty-minute episodes are on the short side.", "history:num"),
      ("My episodes are about 90 seconds long.", None, "history:unit"),
      ("My episodes are not 90 minutes long.", None, "history:neg")],
     [("Ninety-minute episodes are the ideal length.", "assistant:sib")],
     [("Should I split them into three parts?", "follow-up:num"), ("Should I merge them into one part?", "follow-up:sib")]),
    ("plumbing", "My kitchen sink drains very slowly.", "A slow kitchen drain is usually a clog.",
     "How do I fix it?",
     ["The kitchen sink is draining really slowly.", "My kitchen sink is slow to drain."],
     ["Slow kitchen drains are usually caused by a clog."],
     ["What's the way to fix it?", "How can I fix this?"],
     [("My bathroom sink drains very slowly.", "A slow bathroom drain is usually hair.", "history:sib"),
      ("My kitchen sink does not drain at all.", "A kitchen sink that does not drain is fully clogged.", "history:neg"),
      ("My kitchen sink leaks very slowly.", None, "history:sib")],
     [("A slow kitchen drain is usually a broken pipe.", "assistant:sib")],
     [("How do I prevent it?", "follow-up:sib"), ("How much does it cost to fix?", "follow-up:sib")]),
    ("plumbing", "My water heater is 12 years old.", "Twelve years is near the end of a water heater's life.",
     "Should I replace it?",
     ["I have a 12-year-old water heater.", "The water heater is twelve years old."],
     ["At 12 years, a water heater is nearing the end of its life."],
     ["Is it time to replace it?", "Do I need to replace it?"],
     [("My water heater is 2 years old.", "Two years is young for a water heater.", "history:num"),
      ("My water softener is 12 years old.", None, "history:sib"),
      ("My tankless water heater is 12 years old.", "Twelve years is mid-life for a tankless heater.", "history:qual")],
     [("Twelve years is young for a water heater.", "assistant:sib")],
     [("Should I flush it?", "follow-up:sib"), ("Should I insulate it?", "follow-up:sib")]),
    ("birdwatching", "I saw a red bird with a crest at my feeder.", "That sounds like a northern cardinal.",
     "What seeds does it like?",
     ["A red bird with a crest came to my feeder.", "There was a crested red bird at my feeder."],
     ["It sounds like you saw a northern cardinal."],
     ["Which seeds does it prefer?", "What kind of seed does it eat?"],
     [("I saw a blue bird with a crest at my feeder.", "That sounds like a blue jay.", "history:sib"),
      ("I saw a red bird without a crest at my feeder.", None, "history:neg"),
      ("I saw a red hawk with a crest at my feeder.", None, "history:ent")],
     [("That sounds like a scarlet tanager.", "assistant:ent")],
     [("What seeds does it avoid?", "follow-up:sib"), ("What insects does it like?", "follow-up:sib")]),
    ("birdwatching", "I use 8x42 binoculars.", "8x42 binoculars are a good all-round choice.",
     "Are they good for birding at dusk?",
     ["My binoculars are 8x42.", "I'm using binoculars that are 8x42."],
     ["An 8x42 pair is a good all-round choice."],
     ["Do they work well for birdwatching at dusk?", "Are they any good for birding in the evening twilight?"],
     [("I use 10x25 binoculars.", "10x25 binoculars are compact.", "history:num"),
      ("I use an 8x42 spotting scope.", None, "history:sib")],
     [("8x42 binoculars are too dim for low light.", "assistant:qual")],
     [("Are they good for birding at noon?", "follow-up:sib"), ("Are they good for stargazing at dusk?", "follow-up:sib")]),
    ("video", "I edit my videos in DaVinci Resolve.", "DaVinci Resolve is a powerful editor.",
     "How do I export for YouTube?",
     ["I use DaVinci Resolve to edit my videos.", "My editing software is DaVinci Resolve."],
     ["Resolve is a very capable editor."],
     ["What's the best way to export for YouTube?", "How should I export a video for YouTube?"],
     [("I edit my videos in Premiere Pro.", "Premiere Pro is a powerful editor.", "history:ent"),
      ("I edit my videos in iMovie.", "iMovie is a simple editor.", "history:ent"),
      ("I edit my photos in DaVinci Resolve.", None, "history:sib")],
     [("Premiere Pro is a powerful editor.", "assistant:ent")],
     [("How do I export for Instagram?", "follow-up:ent"), ("How do I upload to YouTube?", "follow-up:sib")]),
    ("video", "My footage is 4K at 60 frames per second.", "4K at 60 fps makes large files.",
     "What bitrate should I export at?",
     ["I shot my footage in 4K at 60 fps.", "The footage is 4K, 60 frames per second."],
     ["Footage in 4K at 60 fps produces large files."],
     ["Which bitrate should I use for the export?", "What export bitrate should I pick?"],
     [("My footage is 1080p at 60 frames per second.", "1080p at 60 fps makes moderate files.", "history:num"),
      ("My footage is 4K at 24 frames per second.", "4K at 24 fps makes large files.", "history:num"),
      ("My footage is 4K at 60 frames per second in HDR.", None, "history:qual")],
     [("4K at 60 fps makes small files.", "assistant:sib")],
     [("What resolution should I export at?", "follow-up:sib"), ("What frame rate should I export at?", "follow-up:sib")]),
    ("weddings", "We're having an outdoor wedding in June.", "An outdoor June wedding sounds lovely.",
     "Do we need a tent?",
     ["Our wedding is outdoors in June.", "We are planning an outdoor wedding for June."],
     ["A June wedding outdoors sounds lovely."],
     ["Should we rent a tent?", "Is a tent necessary?"],
     [("We're having an indoor wedding in June.", "An indoor June wedding sounds lovely.", "history:sib"),
      ("We're having an outdoor wedding in December.", "An outdoor December wedding sounds chilly.", "history:sib"),
      ("We're having an outdoor wedding on a beach in June.", None, "history:qual")],
     [("An outdoor June wedding usually needs no cover.", "assistant:neg")],
     [("Do we need a permit?", "follow-up:sib"), ("Do we need heaters?", "follow-up:sib")]),
    ("weddings", "We have 150 guests.", "150 guests is a mid-sized wedding.",
     "How many servers should we hire?",
     ["Our guest list is 150 people.", "There will be 150 guests."],
     ["A wedding with 150 guests is mid-sized."],
     ["How many waiters do we need to hire?", "What number of servers should we hire?"],
     [("We have 50 guests.", "50 guests is a small wedding.", "history:num"),
      ("We have 150 tables.", None, "history:unit")],
     [("150 guests is a mid-sized wedding, and yours is a buffet.", "assistant:qual")],
     [("How many bartenders should we hire?", "follow-up:sib"), ("How many tables should we rent?", "follow-up:sib")]),
    ("kayaking", "I paddle a 12-foot recreational kayak.", "A 12-foot recreational kayak is stable and easy to handle.",
     "Can I take it on the ocean?",
     ["My kayak is a 12 foot recreational one.", "I have a twelve-foot recreational kayak."],
     ["Twelve-foot recreational kayaks are stable and easy to handle."],
     ["Is it safe to take it out on the ocean?", "Can I use it on the sea?"],
     [("I paddle a 17-foot sea kayak.", "A 17-foot sea kayak is fast and seaworthy.", "history:num"),
      ("I paddle a 12-foot inflatable kayak.", "A 12-foot inflatable kayak is light and portable.", "history:sib"),
      ("I paddle a 12-foot recreational canoe.", None, "history:sib")],
     [("A 12-foot recreational kayak is not built for open water.", "assistant:neg")],
     [("Can I take it on a river?", "follow-up:sib"), ("Can I take it on a lake?", "follow-up:sib")]),
    ("kayaking", "I'm a beginner and I can't roll yet.", "Many beginners can't roll yet, that's fine.",
     "What should I do if I capsize?",
     ["I'm new to kayaking and can't do a roll yet.", "As a beginner, I can't roll yet."],
     ["Plenty of beginners can't roll yet, and that's okay."],
     ["What do I do if I flip over?", "If I capsize, what should I do?"],
     [("I'm a beginner and I can roll.", "Rolling as a beginner is impressive.", "history:neg"),
      ("I'm an instructor and I can't roll yet.", None, "history:sib")],
     [("Beginners should learn to roll before paddling.", "assistant:qual")],
     [("What should I do if I get lost?", "follow-up:sib"), ("What should I do if I get cold?", "follow-up:sib")]),
    ("pottery", "I throw on a wheel with stoneware clay.", "Stoneware is a forgiving clay for the wheel.",
     "What cone should I fire it to?",
     ["I use stoneware clay on the wheel.", "I'm throwing stoneware on a pottery wheel."],
     ["Stoneware clay is forgiving to throw on a wheel."],
     ["Which cone do I fire it to?", "To what cone should it be fired?"],
     [("I throw on a wheel with porcelain clay.", "Porcelain is a demanding clay for the wheel.", "history:sib"),
      ("I throw on a wheel with earthenware clay.", "Earthenware is a soft clay for the wheel.", "history:sib"),
      ("I hand-build with stoneware clay.", None, "history:sib")],
     [("Porcelain is a forgiving clay for the wheel.", "assistant:sib")],
     [("What glaze should I use on it?", "follow-up:sib"), ("How long should it dry?", "follow-up:sib")]),
    ("pottery", "My kiln is electric and holds 7 cubic feet.", "A 7 cubic foot electric kiln is a good studio size.",
     "How long does a glaze firing take?",
     ["I have a 7 cubic foot electric kiln.", "My electric kiln has 7 cubic feet of space."],
     ["A seven cubic foot electric kiln is a good size for a studio."],
     ["How many hours is a glaze firing?", "How long will a glaze firing last?"],
     [("My kiln is gas and holds 7 cubic feet.", "A 7 cubic foot gas kiln is a good studio size.", "history:sib"),
      ("My kiln is electric and holds 2 cubic feet.", "A 2 cubic foot electric kiln is small.", "history:num")],
     [("A 7 cubic foot electric kiln is slow to cool.", "assistant:qual")],
     [("How long does a bisque firing take?", "follow-up:sib"), ("How long does it take to cool?", "follow-up:sib")]),
    ("fishing", "I fish for trout in small mountain streams.", "Small mountain streams are great for trout.",
     "What size line should I use?",
     ["I go trout fishing in small mountain streams.", "I fish small mountain creeks for trout."],
     ["Trout fishing in small mountain streams is great."],
     ["Which line weight should I use?", "What line size do you recommend?"],
     [("I fish for bass in small mountain streams.", "Small mountain streams can hold bass.", "history:ent"),
      ("I fish for trout in large lakes.", "Large lakes are great for trout.", "history:sib"),
      ("I fly fish for trout in small mountain streams.", None, "history:qual")],
     [("Small mountain streams are great for bass.", "assistant:ent")],
     [("What size hook should I use?", "follow-up:sib"), ("What size rod should I use?", "follow-up:sib")]),
    ("fishing", "I caught a 5 pound catfish.", "A 5-pound catfish is a nice catch.",
     "How should I clean it?",
     ["I landed a five-pound catfish.", "I just caught a catfish that weighs 5 pounds."],
     ["Nice catch, a five-pound catfish."],
     ["What's the best way to clean it?", "How do I clean it?"],
     [("I caught a 50 pound catfish.", "A 50-pound catfish is a huge catch.", "history:num"),
      ("I caught a 5 pound carp.", "A 5-pound carp is a nice catch.", "history:ent"),
      ("I caught a 5 kilo catfish.", None, "history:unit")],
     [("A 5-pound catfish is too small to keep.", "assistant:qual")],
     [("How should I cook it?", "follow-up:sib"), ("How should I freeze it?", "follow-up:sib")]),
]


def pairs() -> list[dict]:
    out: list[dict] = []

    def add(conv: int, topic: str, a: str, b: str, ctx_a: list[str], ctx_b: list[str], label: str, kind: str) -> None:
        out.append({"a": a, "b": b, "label": label, "kind": kind, "topic": topic, "group": f"{topic}/dev{conv}",
                    "split": "dev", "context_a": ctx_a, "context_b": ctx_b})

    for i, (topic, user, reply, q, users, replies, qs, user_traps, reply_traps, q_traps) in enumerate(CONVERSATIONS):
        ctx = [user, reply]
        for q2 in qs:
            add(i, topic, q, q2, ctx, ctx, "same", "conversation: follow-up reworded")
        for u2 in users:
            add(i, topic, q, q, ctx, [u2, reply], "same", "conversation: user turn reworded")
        for r2 in replies:
            add(i, topic, q, q, ctx, [user, r2], "same", "conversation: reply reworded")
        for k, u2 in enumerate(users):
            add(i, topic, q, qs[k % len(qs)], ctx, [u2, replies[k % len(replies)]], "same", "conversation: all reworded")
        for k, (u2, trap_reply, kind) in enumerate(user_traps):
            add(i, topic, q, q, ctx, [u2, trap_reply or reply], "different", kind)
            add(i, topic, q, qs[k % len(qs)], ctx, [u2, trap_reply or reply], "different", kind)
        for r2, kind in reply_traps:
            add(i, topic, q, q, ctx, [user, r2], "different", kind)
            add(i, topic, q, q, ctx, [users[0], r2], "different", kind)
        for q2, kind in q_traps:
            add(i, topic, q, q2, ctx, ctx, "different", kind)
    return out


if __name__ == "__main__":
    rows = pairs()
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    same = sum(r["label"] == "same" for r in rows)
    print(f"{len(rows)} pairs ({same} true repeats, {len(rows) - same} traps) -> {OUT}")
