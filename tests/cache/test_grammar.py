"""Rewordings that English grammar makes equal (app/cache/lexicon.py frames, app/cache/guard.py), decided as
the cache decides at its defaults: the guard, then the contextual check where the guard is unsure and
gives no hard reason (app/cache/verify.py). Each rule: rewordings served, and traps refused (another
period, modal, number, negation, entity, polarity)."""

from __future__ import annotations

import pytest

from app.cache import context, guard, history
from app.cache.embedder import OnnxEncoder
from app.cache.normalise import normalise


@pytest.fixture(scope="module")
def encoder():
    return OnnxEncoder("int8")


def served(encoder, cached: str, asked: str) -> bool:
    """The verifiers' verdict at the defaults (`bench/semantic_cache.py`'s "guard + context")."""
    cached, asked = normalise(cached), normalise(asked)
    why = guard.mismatch(cached, asked)
    if why is None:
        return True
    if why in guard.HARD_REASONS:
        return False
    u = guard.unaligned(cached, asked)
    refused = context.refused_before_reading(cached, asked, u)
    if refused:
        return False
    return context.served(cached, asked, u, encoder.word_states(cached), encoder.word_states(asked), refused=refused)


def canon(text: str) -> list[str]:
    return [t.canon for t in guard.tokens(text)]


# A quantifier that sets a scope is never filler a rewording drops (app/cache/guard.py, `_filler`).
@pytest.mark.parametrize("a, b", [
    ("Do I need to water every plant?", "Do I need to water the plant?"),
    ("Should I check each tire?", "Should I check the tire?"),
    ("What should I eat every day?", "What should I eat that day?"),
    ("Can all students apply?", "Can students apply?"),
    ("Is the museum open only on weekends?", "Is the museum open on weekends?"),
])
def test_a_scope_dropped_is_another_question(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)


def test_a_degree_word_is_still_a_rewording():
    assert guard.mismatch("Is German harder to learn than French?", "Is German more difficult to learn than French?") != "number"
    assert guard.mismatch("Do I need a visa for Japan?", "Do I need a visa for my trip to Japan?") is not None


# A period's frequency: "daily" = "every day" = "each day" = "per day" = "a day" after a plural.
@pytest.mark.parametrize("a, b", [
    ("How many mg of caffeine is too much per day?", "How many mg of caffeine is too much daily?"),
    ("How much water should I drink each day?", "How much water should I drink daily?"),
    ("I use retinol every night.", "I use retinol nightly."),
    ("How many steps a day should I walk?", "How many steps should I walk daily?"),
    ("Do cats sleep 16 hours a day?", "Do cats sleep 16 hours per day?"),
    ("What is the annual fee?", "What is the yearly fee?"),
    ("Should I take it twice a day?", "Should I take it twice daily?"),  # after a count: "a day"
    ("How many times a week should I exfoliate?", "How many times weekly should I exfoliate?"),
])
def test_a_period_said_as_an_adverb_or_with_every_each_per_a_aligns(encoder, a, b):
    assert guard.mismatch(a, b) is None
    assert served(encoder, a, b) and served(encoder, b, a)


@pytest.mark.parametrize("a, b", [
    ("How much water should I drink daily?", "How much water should I drink weekly?"),  # another period
    ("Should I water it every day?", "Should I water it every other day?"),
    ("Should I take it twice a day?", "Should I take it twice a week?"),
    ("Should I take it twice daily?", "Should I take it three times daily?"),  # a number
    ("What should I eat every day?", "What should I eat that day?"),  # a day, not every day
    ("Do cats sleep 16 hours a day?", "Do cats sleep 16 hours a week?"),
    ("Is it safe to take ibuprofen daily?", "Is it unsafe to take ibuprofen daily?"),
    ("How many hours is a day on Mars?", "How many hours is a year on Mars?"),
])
def test_a_period_keeps_what_else_changed(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)


def test_a_day_after_a_verb_is_a_day_not_a_frequency():
    assert "every" not in canon("How many hours is a day on Mars?")
    assert "every" not in canon("How long does a day last?")


# "Is it fine / alright to X?" asks leave as "Is it okay to X?" does ("Can I X?"); "Is it good / time to X?" asks
# advice as "Is it a good idea to X?" does ("Should I X?").
@pytest.mark.parametrize("a, b", [
    ("Is it fine to reuse tea leaves?", "Can I reuse tea leaves?"),
    ("Is it alright to shower after a tattoo?", "Is it okay to shower after a tattoo?"),
    ("Is it all right to freeze cooked rice?", "Can I freeze cooked rice?"),
    ("Is it good to stretch before running?", "Should I stretch before running?"),
    ("How many verbs should I learn per day?", "How many verbs is it good to learn each day?"),
    ("Should I replace it?", "Is it time to replace it?"),
])
def test_fine_and_good_frames_align(encoder, a, b):
    assert guard.mismatch(a, b) is None
    assert served(encoder, a, b) and served(encoder, b, a)


@pytest.mark.parametrize("a, b, why", [
    ("Is it fine to reuse tea leaves?", "Should I reuse tea leaves?", "modal"),  # leave is not advice
    ("Is it good to reuse tea leaves?", "Can I reuse tea leaves?", "modal"),
    ("Is it alright to drink coffee every day?", "Must I drink coffee every day?", "modal"),
    ("Is it good to pop pimples?", "Is it bad to pop pimples?", None),  # an opposite
    ("Is it good to stretch before running?", "Is it good to stretch after running?", None),
    ("Is it fine to drink coffee daily?", "Is it safe to drink coffee daily?", None),  # leave is not safety
    ("Is it fine to eat raw eggs?", "Is it fine to eat raw fish?", None),
    ("Is it time to replace it?", "Can I replace it?", "modal"),
    ("Is it time to replace it?", "Is it too late to replace it?", None),
    ("Is it time to replace my tires?", "Is it time to rotate my tires?", None),
])
def test_fine_and_good_keep_what_else_changed(encoder, a, b, why):
    assert not served(encoder, a, b) and not served(encoder, b, a)
    if why:
        assert guard.mismatch(a, b) == why


# "Is V-ing X ADJ?" = "Is it ADJ to V X?" (the subject moved out), and so the topic taken up by "it".
@pytest.mark.parametrize("a, b", [
    ("Can I reuse tea leaves?", "Reusing tea leaves: is it fine?"),
    ("Is eating eggs every day healthy?", "Is it healthy to eat eggs every day?"),
    ("Is taking ibuprofen with food a good idea?", "Should I take ibuprofen with food?"),
    ("Is drinking coffee on an empty stomach bad?", "Is it bad to drink coffee on an empty stomach?"),
    ("Is it legal to fly a drone in a park?", "Is flying a drone in a park legal?"),
])
def test_a_gerund_subject_reads_as_it_and_an_infinitive(encoder, a, b):
    assert guard.mismatch(a, b) is None
    assert served(encoder, a, b) and served(encoder, b, a)


@pytest.mark.parametrize("a, b", [
    ("Is eating eggs every day healthy?", "Is it unhealthy to eat eggs every day?"),  # a prefix
    ("Is eating eggs every day healthy?", "Is it healthy to eat eggs every week?"),  # another period
    ("Is eating eggs every day healthy?", "Is it healthy to eat eggs every day?  No, not eggs: fish."),
    ("Is taking ibuprofen with food a bad idea?", "Should I take ibuprofen with food?"),  # a bad idea
    ("Is flying a drone in a park legal?", "Is it illegal to fly a drone in a park?"),
    ("Is flying a drone in a park legal?", "Is flying a drone in a park not legal?"),  # a negation
    ("Is flying a drone in a park legal?", "Can I fly a drone in a park?"),  # legal is no permission asked
    ("Is eating 2 eggs a day healthy?", "Is it healthy to eat 3 eggs a day?"),  # a number
])
def test_a_gerund_subject_keeps_what_else_changed(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)


@pytest.mark.parametrize("text", [
    "Is everything okay?",  # no verb's -ing form
    "Is the morning better?",
    "Is the running track open?",  # a noun first
    "Is swimming good exercise?",  # the last word is a noun
])
def test_no_gerund_subject_is_read_where_there_is_none(text):
    assert "to" not in canon(text)


# "What X do I need to V Y?": what is needed is the question's object, not what must be done.
@pytest.mark.parametrize("text, reading", [
    ("What documents do I need to sell a house?", "what document i need to sell hous"),
    ("What do I need to make pancakes?", "what i need to creat pancak"),
    ("What do I need to bring?", "what must i bring"),  # the object is what to bring
    ("What do I need to know about taxes?", "what must i know about tax"),
    ("Which forms do I need to file?", "what form must i fil"),
    ("Do I need to sell my house?", "must i sell my hous"),
])
def test_need_with_a_thing_needed_stays_need(text, reading):
    assert " ".join(canon(text)) == reading


def test_what_is_needed_aligns_with_what_is_required_and_not_with_another_purpose(encoder):
    a = "What documents do I need to sell a house?"
    assert guard.mismatch(a, "What documents are required to sell a house?") is None
    assert not served(encoder, a, "What documents are required to buy a house?")
    assert not served(encoder, a, "What documents must I sell?")


def earlier_turn_matches(encoder, role: str, cached: str, asked: str) -> bool:
    """An earlier turn as the cache compares it (app/cache/history.py, then the threshold 0.75)."""
    need = history.check(role, cached, asked)
    if need is history.Need.NO or float(encoder.encode([cached])[0] @ encoder.encode([asked])[0]) < 0.75:
        return False
    return need is history.Need.SIMILARITY or served(encoder, cached, asked)


# A reply that keeps its facts may be reworded as a question is (the contextual check).
@pytest.mark.parametrize("cached, asked", [
    ("Nightly retinol at 45 is a common routine.", "Using retinol every night at 45 is a common routine."),
    ("Retinol works well at night.", "Using retinol at night works well."),
])
def test_a_reply_in_other_words_matches_in_context(encoder, cached, asked):
    assert earlier_turn_matches(encoder, "assistant", cached, asked)


@pytest.mark.parametrize("cached, asked", [
    ("Oak is a great choice for a sturdy bookshelf.", "Oak is a poor choice for a sturdy bookshelf."),
    ("Grilled salmon pairs well with white wine.", "Grilled salmon pairs well with red wine."),
    ("Your kayak is stable in calm water.", "Your kayak is stable in rough water."),
    ("Most beginners find it easy.", "Few beginners find it easy."),
    ("Retinol works well at night.", "Retinol works well in the morning."),
    ("A 10-inch blade is the most common size.", "A 10-inch blade is the least common size."),
    ("Your water heater is near the end of its life.", "Your water heater is near the start of its life."),
    ("That is normal for a puppy.", "That is unusual for a puppy."),
    ("Pine is soft and easy to work.", "Pine is soft and hard to work."),
    ("It is a good idea to feed them in winter.", "It is a bad idea to feed them in winter."),
    ("Feed them sugar syrup in the fall.", "Feed them sugar syrup in the spring."),
    ("Small mountain streams are great for trout.", "Small mountain streams are bad for trout."),
    ("Two backyard hives is a nice setup.", "Two backyard hives is a nice setup for a beginner."),
    ("You should replace it soon.", "You can replace it soon."),
])
def test_a_reply_that_says_otherwise_never_matches(encoder, cached, asked):
    assert not earlier_turn_matches(encoder, "assistant", cached, asked)
    assert not earlier_turn_matches(encoder, "assistant", asked, cached)


# Leave asked for someone else: the for-phrase is the infinitive's subject.
@pytest.mark.parametrize("a, b", [
    ("Can it eat avocado?", "Is avocado ok for it to eat?"),
    ("Can my dog eat grapes?", "Is it okay for my dog to eat grapes?"),
    ("Can dogs eat grapes?", "Are grapes okay for dogs to eat?"),
    ("Can kids drink coffee?", "Is it fine for kids to drink coffee?"),
])
def test_leave_for_someone_else_reads_as_can_they(encoder, a, b):
    assert guard.mismatch(a, b) is None
    assert served(encoder, a, b) and served(encoder, b, a)


@pytest.mark.parametrize("a, b", [
    ("Is it okay for my dog to eat grapes?", "Can my cat eat grapes?"),  # another subject
    ("Is it okay for my dog to eat grapes?", "Can I eat grapes?"),
    ("Is it okay for my dog to eat grapes?", "Is it okay for my dog to eat raisins?"),
    ("Is it okay for my dog to eat grapes?", "Should my dog eat grapes?"),  # leave is not advice
    ("Is it okay for my dog to eat grapes?", "Is it dangerous for my dog to eat grapes?"),
    ("Are grapes okay for dogs to eat?", "Are grapes toxic for dogs to eat?"),
    ("Is avocado ok for it to eat?", "Can it not eat avocado?"),  # a negation
    ("Is it ok for kids to drink coffee?", "Can adults drink coffee?"),
    ("Is it fine for my baby to sleep on her side?", "Can my baby sleep on her back?"),
    ("Is it okay for my son to skip school?", "Must my son skip school?"),
    ("Is it okay for 2 people to share a room?", "Can 3 people share a room?"),  # a number
])
def test_leave_for_someone_else_keeps_what_else_changed(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)


# An age said without its unit is said in years ("I'm 45 and ..." = "I'm 45 years old and ...").
@pytest.mark.parametrize("cached, asked", [
    ("I'm 45 years old.", "I'm 45."),
    ("My son is 4.", "My son is 4 years old."),
    ("I am 45 and I use retinol nightly.", "I'm 45 years old and use retinol every night."),
])
def test_an_age_without_its_unit_is_in_years(encoder, cached, asked):
    assert earlier_turn_matches(encoder, "user", cached, asked)


@pytest.mark.parametrize("cached, asked", [
    ("I'm 45.", "I'm 45 months old."),  # another unit
    ("I'm 45 years old.", "I'm 54."),  # another number
    ("My dog is 12.", "My dog is 12 weeks old."),
    ("My son is 4.", "I have 4 sons."),  # a count is no age
    ("My water heater is 12.", "I have 12 water heaters."),
    ("I am 45 and I use retinol nightly.", "I'm 45 years old and use retinol every week."),
    ("I'm 45 and I use retinol.", "I'm 45 and I don't use retinol."),
])
def test_an_age_keeps_what_else_changed(encoder, cached, asked):
    assert not earlier_turn_matches(encoder, "user", cached, asked)
    assert not earlier_turn_matches(encoder, "user", asked, cached)


def test_a_number_that_is_no_bare_age_keeps_its_words():
    assert canon("I have a 12-year-old water heater.") == ["i", "hav", "12", "year", "old", "water", "heater"]
    assert canon("I have 12 water heaters.") == ["i", "hav", "12", "water", "heater"]
    assert "year" not in canon("What is 5 plus 5?")


# "go V-ing" names the activity: "I go trout fishing" = "I fish for trout", "Can I go swimming?" = "Can I swim?".
def test_go_and_an_activity_is_the_activity(encoder):
    assert earlier_turn_matches(encoder, "user", "I go trout fishing in small mountain streams.",
                                "I fish for trout in small mountain streams.")
    assert earlier_turn_matches(encoder, "user", "I go fishing every weekend.", "I fish every weekend.")
    assert guard.mismatch("Can I go swimming after eating?", "Can I swim after eating?") is None


@pytest.mark.parametrize("cached, asked", [
    ("I go trout fishing in small mountain streams.", "I go fly fishing in small mountain streams."),
    ("I go fishing in small mountain streams.", "I go swimming in small mountain streams."),
    ("I go fishing every weekend.", "I went fishing last weekend."),
])
def test_go_and_an_activity_keeps_what_else_changed(encoder, cached, asked):
    assert not earlier_turn_matches(encoder, "user", cached, asked)


@pytest.mark.parametrize("a, b", [
    ("Can I go swimming after eating?", "Can I go running after eating?"),
    ("Can I go swimming after eating?", "Can I go swimming before eating?"),
])
def test_go_and_an_activity_in_a_question_keeps_what_else_changed(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)


# The instrument: "use X to V Y" = "V Y with X".
def test_use_x_to_do_it_is_doing_it_with_x(encoder):
    assert earlier_turn_matches(encoder, "user", "I use a USB microphone to record my podcast.",
                                "I record my podcast with a USB microphone.")
    assert served(encoder, "Can I use baking soda to clean my oven?", "Can I clean my oven with baking soda?")
    assert canon("I used to smoke.") == ["i", "used", "to", "smok"]  # the habitual past is no instrument


@pytest.mark.parametrize("cached, asked", [
    ("I use a USB microphone to record my podcast.", "I record my podcast with an XLR microphone."),
    ("I use a USB microphone to record my podcast.", "I use my podcast to record a USB microphone."),
    ("I use a USB microphone to record my podcast.", "I use a USB microphone to edit my podcast."),
    ("I use my phone to record my podcast.", "I record my phone with my podcast."),  # instrument and object swapped
])
def test_an_instrument_keeps_what_else_changed(encoder, cached, asked):
    assert not earlier_turn_matches(encoder, "user", cached, asked)


@pytest.mark.parametrize("a, b", [
    ("Can I use baking soda to clean my oven?", "Can I clean baking soda with my oven?"),
    ("Can I use baking soda to clean my oven?", "Can I use vinegar to clean my oven?"),
    ("Can I use baking soda to clean my oven?", "Can I clean my oven without baking soda?"),
])
def test_an_instrument_in_a_question_keeps_what_else_changed(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)


# Where a thing is, said with a verb of position before a preposition of place.
@pytest.mark.parametrize("a, b", [
    ("Is Mexico City above sea level?", "Does Mexico City lie above sea level?"),
    ("Is the village on a hill?", "Does the village sit on a hill?"),
])
def test_a_verb_of_position_reads_as_is(encoder, a, b):
    assert guard.mismatch(a, b) is None
    assert served(encoder, a, b) and served(encoder, b, a)


@pytest.mark.parametrize("a, b", [
    ("Does Mexico City lie above sea level?", "Is Mexico City below sea level?"),
    ("Does the town lie in Italy?", "Is the town in France?"),
    ("Does the village sit on a hill?", "Is the village on a lake?"),
    ("Does the village sit on a hill?", "Is the village near a hill?"),
])
def test_a_verb_of_position_keeps_what_else_changed(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)


def test_lie_without_a_place_is_lie():
    assert canon("Does he lie about his age?") == ["he", "lie", "about", "his", "age"]


# A sentence opening with its subject's role: "As a beginner, I ..." = "I'm a beginner and I ...".
def test_a_role_said_first_is_what_the_subject_is(encoder):
    assert earlier_turn_matches(encoder, "user", "I'm a beginner and I can't roll yet.", "As a beginner, I can't roll yet.")
    assert guard.mismatch("As a new parent, I worry about sleep.", "I'm a new parent and I worry about sleep.") is None


@pytest.mark.parametrize("cached, asked", [
    ("I'm a beginner and I can't roll yet.", "As an expert, I can't roll yet."),
    ("I'm a beginner and I can't roll yet.", "As a beginner, I can roll now."),
    ("I'm a beginner and I can't roll yet.", "As a beginner, I can't swim yet."),
    ("I'm a nurse and I work nights.", "As a nurse, my wife works nights."),
])
def test_a_role_said_first_keeps_what_else_changed(encoder, cached, asked):
    assert not earlier_turn_matches(encoder, "user", cached, asked)


# A year of origin after its noun, at the end: "a bottle of Barolo from 2015" = "a bottle of 2015 Barolo".
def test_a_year_after_its_noun_reads_before_it(encoder):
    assert earlier_turn_matches(encoder, "user", "I have a bottle of 2015 Barolo.", "I own a bottle of Barolo from 2015.")


@pytest.mark.parametrize("cached, asked", [
    ("I have a bottle of 2015 Barolo.", "I own a bottle of Barolo from 2016."),  # another year
    ("I have a bottle of 2015 Barolo.", "I own a bottle of Chianti from 2015."),  # another wine
    ("I have a bottle of 2015 Barolo.", "I own a bottle of Barolo since 2015."),
])
def test_a_year_after_its_noun_keeps_what_else_changed(encoder, cached, asked):
    assert not earlier_turn_matches(encoder, "user", cached, asked)


def test_a_year_in_a_range_keeps_its_role():
    assert guard.mismatch("Prices rose from 2015 to 2020.", "Prices rose from 2020 to 2015.") == "role"


# A yes/no question asked with a modal is not the one asked of the fact with "do" (a hard refusal).
@pytest.mark.parametrize("a, b", [
    ("Do dogs eat grass?", "Should dogs eat grass?"),
    ("Does my dog eat grass?", "Can my dog eat grass?"),
    ("Does she eat meat?", "Should she eat meat?"),
    ("Do people tip in Japan?", "Should people tip in Japan?"),
    ("Do doctors recommend statins?", "Must doctors recommend statins?"),
    ("Do cats sleep a lot?", "Can cats sleep a lot?"),
    ("Do people eat raw eggs?", "Is it okay to eat raw eggs?"),  # the frame reads "can i"
])
def test_a_modal_against_the_fact_is_refused(encoder, a, b):
    assert guard.mismatch(a, b) == "modal" and guard.mismatch(b, a) == "modal"
    assert not served(encoder, a, b) and not served(encoder, b, a)


@pytest.mark.parametrize("a, b", [
    ("Should I take my pills at 8 am?", "Is 8 am the right time for my pills?"),  # advice asked with "is"
    ("How often should I feed a puppy?", "How often do I feed a puppy?"),  # a question word first
    ("Do I need to file a tax return?", "Should I file a tax return?"),  # both modals ("must", "should")
])
def test_a_modal_against_the_fact_is_only_a_yes_no_question_with_do(a, b):
    assert guard.mismatch(a, b) != "modal"


# "Do ... need ...?" and "Do ... have to ...?" ask an obligation, as "should" and "must" do: no fact against
# advice (conversation-dev: "Do they need extra feeding in winter?" / "Should I give them extra food over the
# winter?"). The words still differ, so the pair is the contextual check's (and a judge's) to decide. Against
# "can" (a permission) it stays a modal change, and "recommend" is what someone does.
@pytest.mark.parametrize("a, b", [
    ("Do they need extra feeding in winter?", "Should I give them extra food over the winter?"),
    ("Do we need a tent?", "Should we rent a tent?"),
    ("Does my dog need a coat in winter?", "Must my dog wear a coat in winter?"),
    ("Do I have to tip in Japan?", "Should I tip in Japan?"),
])
def test_a_need_asked_with_do_is_advice_as_should_and_must_ask_it(a, b):
    assert guard.mismatch(a, b) not in guard.HARD_REASONS and guard.mismatch(b, a) not in guard.HARD_REASONS


@pytest.mark.parametrize("a, b", [
    ("Does my dog need a coat in winter?", "Can my dog wear a coat in winter?"),  # a permission
    ("Do doctors recommend statins?", "Must doctors recommend statins?"),  # what doctors do
])
def test_a_need_against_a_permission_or_a_recommendation_done_stays_a_modal_change(a, b):
    assert guard.mismatch(a, b) == "modal" and guard.mismatch(b, a) == "modal"



# A question word asked of what is done ("do", "does", "did") is not the one asked of what should, must or can
# be done: the fact is not the advice, the limit or the permission (a hard refusal, as for yes/no questions).
@pytest.mark.parametrize("a, b", [
    ("What do cats eat?", "What should cats eat?"),
    ("What do dogs eat?", "What can dogs eat?"),
    ("What do people eat in Japan?", "What can people eat in Japan?"),
    ("Where do pandas live?", "Where can pandas live?"),
    ("When does a baby start walking?", "When should a baby start walking?"),
    ("How often do cats sleep?", "How often should cats sleep?"),
    ("How long do dogs live?", "How long can dogs live?"),
    ("How much does a puppy eat?", "How much should a puppy eat?"),
    ("Why do cats purr?", "Why should cats purr?"),
    ("Why do I stretch before running?", "Why should I stretch before running?"),  # "why": a cause, not a choice
    ("What do I do for a living?", "What should I do for a living?"),  # a habit: "for a living", "usually"
    ("What do you do for a living?", "What should you do for a living?"),
    ("What do I usually eat for breakfast?", "What should I eat for breakfast?"),
    ("What did I eat for dinner?", "What should I eat for dinner?"),  # the past is a fact for anyone
    ("Where did I put my keys?", "Where should I put my keys?"),
    ("How did I get here?", "How can I get here?"),
])
def test_a_question_word_asked_of_the_fact_is_not_asked_of_a_modal(encoder, a, b):
    assert guard.mismatch(a, b) == "modal" and guard.mismatch(b, a) == "modal"
    assert not served(encoder, a, b) and not served(encoder, b, a)


# But "do I" / "do you" / "does one" after a question word asks what to do next as often as "should I"
# ("Where do I file taxes this year?" = "Where should I ...?", bench/data's tune split), "how" + "do" asks for a
# way or a mechanism ("How do bats see?" = "How can bats see?"), a need or a recommendation is advice already,
# and "would" asks what is expected ("How long would it take?" = "How long does it take?").
@pytest.mark.parametrize("a, b", [
    ("How do I reset my password?", "How can I reset my password?"),
    ("How do I reset my password?", "How should I reset my password?"),
    ("How do bats see in the dark?", "How can bats see in the dark?"),
    ("How does a beginner start running?", "How should a beginner start running?"),
    ("What do I eat before a run?", "What should I eat before a run?"),
    ("Where do I go to renew a passport?", "Where should I go to renew a passport?"),
    ("What do I do if my car breaks down?", "What should I do if my car breaks down?"),
    ("When do I plant tulips?", "When should I plant tulips?"),
    ("Which laptop do I buy?", "Which laptop should I buy?"),
    ("What do you eat before a run?", "What should you eat before a run?"),
    ("What does one wear to a funeral?", "What should one wear to a funeral?"),
    ("How long does it take to drive to Boston?", "How long would it take to drive to Boston?"),
    ("Why does my car make a clicking noise?", "Why would my car make a clicking noise?"),
])
def test_a_question_word_with_do_i_or_how_is_still_a_rewording(encoder, a, b):
    assert guard.mismatch(a, b) is None
    assert served(encoder, a, b) and served(encoder, b, a)


@pytest.mark.parametrize("a, b", [
    ("How much sleep does a teenager need?", "How much sleep should a teenager get?"),
    ("What moisturizer do you recommend?", "Which moisturizer should I use?"),
    ("Why do I need a visa?", "Why should I get a visa?"),
])
def test_a_need_or_a_recommendation_asked_with_do_is_advice(a, b):
    assert guard.mismatch(a, b) != "modal" and guard.mismatch(b, a) != "modal"

# A role word left at the end of the question (stranded) keeps its role: "to" and "from" there still differ.
@pytest.mark.parametrize("a, b", [
    ("What country should I ship it to?", "What country should I ship it from?"),
    ("Who should I send it to?", "Who should I send it from?"),
    ("What should I clean it with?", "What should I clean it without?"),
])
def test_a_stranded_role_word_keeps_its_role(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)


# A preposition in front of the question word is the one stranded at the end ("For how long ...?" = "How long ...?").
@pytest.mark.parametrize("a, b", [
    ("For how long should I boil eggs?", "How long should I boil eggs?"),
    ("To what temperature should I heat the oven?", "What temperature should I heat the oven to?"),
    ("With what should I clean it?", "What should I clean it with?"),
    ("In which country is Timbuktu?", "Which country is Timbuktu in?"),
])
def test_a_preposition_in_front_is_the_one_stranded(encoder, a, b):
    assert guard.mismatch(a, b) is None
    assert served(encoder, a, b) and served(encoder, b, a)


@pytest.mark.parametrize("a, b", [
    ("To what country should I ship it?", "From what country should I ship it?"),
    ("To what country should I ship it?", "What country should I ship it from?"),
    ("To what temperature should I heat the oven?", "From what temperature should I heat the oven?"),
    ("By how much did prices rise?", "How much did prices fall?"),
])
def test_a_preposition_in_front_keeps_its_role(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)


# What "it" or "they" "need V-ing" needs to be V-ed; in a question for a frequency, "need to" is "should".
@pytest.mark.parametrize("a, b", [
    ("How often does it need servicing?", "How often should it be serviced?"),
    ("How many times does it need watering?", "How many times should it be watered?"),
])
def test_a_passive_gerund_after_need_aligns(encoder, a, b):
    assert guard.mismatch(a, b) is None
    assert served(encoder, a, b) and served(encoder, b, a)


@pytest.mark.parametrize("a, b", [
    ("How often does it need servicing?", "How often should it be cleaned?"),
    ("How often does it need servicing?", "How often can it be serviced?"),  # a limit is not advice
    ("Does it need washing?", "Can it be washed?"),
    ("How often do they need feeding?", "How often do they need watering?"),
])
def test_a_passive_gerund_keeps_what_else_changed(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)


def test_need_with_a_thing_is_left_alone():
    assert canon("Does it need nothing?") == ["it", "need", "nothing"]  # a negation is never stemmed
    assert canon("I need training.") == ["i", "need", "train"]


# "one" after a determiner is a pronoun for a noun said before ("which one", "a diminished one", "the same one"),
# no number: a rewording without it is no other number (bench/data: "How does a major chord differ from a
# diminished one?"). Before a noun, or without a determiner, it counts ("for one site", "a one bedroom
# apartment", "two monitors or one").
@pytest.mark.parametrize("text, words", [
    ("Which one should I buy?", ["what", "one", "should", "i", "buy"]),
    ("How does a major chord differ from a diminished one?", ["how", "major", "chord", "differ", "from", "diminish", "one"]),
    ("Can I use the same one again?", ["can", "i", "use", "sam", "one", "again"]),
    ("How do I clear the cache for one site?", ["how", "to", "clear", "cach", "for", "1", "websit"]),
    ("Is a one bedroom apartment enough?", ["1", "bedroom", "apartment", "enough"]),
    ("Should I get two monitors or one?", ["should", "i", "obtain", "2", "monitor", "or", "1"]),
    ("Is one egg a day healthy?", ["1", "egg", "day", "healthy"]),
])
def test_one_is_a_number_only_where_it_counts(text, words):
    assert canon(text) == words


@pytest.mark.parametrize("a, b", [
    ("Which one should I buy?", "Which should I buy?"),
    ("What is the difference between a major and a diminished chord?", "How does a major chord differ from a diminished one?"),
])
def test_one_as_a_pronoun_is_no_number(a, b):
    assert guard.mismatch(a, b) != "number" and guard.mismatch(b, a) != "number"


@pytest.mark.parametrize("a, b", [
    ("How do I clear my browser cache for one site?", "How do I clear my browser cache for two sites?"),
    ("Should I split them into two parts?", "Should I split them into one part?"),
    ("Is a one bedroom apartment enough?", "Is a two bedroom apartment enough?"),
    ("Is it better to have two monitors or one?", "Is it better to have two monitors or three?"),
])
def test_one_as_a_number_is_still_a_number(a, b):
    assert guard.mismatch(a, b) == "number" and guard.mismatch(b, a) == "number"


# "pair" counts pairs, not two of a thing, and is a verb as often ("pair my AirPods", "what wine would pair best"):
# no number word. "a pair of socks" is not "two pairs of socks" (both were "2 socks" with a "pair" more), nor is
# "pair two speakers" four speakers.
def test_pair_is_no_number():
    assert canon("How do I pair two speakers?") == ["how", "to", "pair", "2", "speaker"]
    assert guard.mismatch("Which wine goes best with it?", "What wine would pair best with it?") != "number"
    assert guard.mismatch("How do I pair my AirPods with my Mac?", "How do I connect my AirPods to my Mac?") != "number"


@pytest.mark.parametrize("a, b", [
    ("How much does a pair of running shoes cost?", "How much do two pairs of running shoes cost?"),
    ("Should I pack a pair of socks?", "Should I pack two pairs of socks?"),
    ("How do I pair two speakers?", "How do I connect four speakers?"),
    ("Is a pair of dice enough?", "Are two dice enough?"),
])
def test_a_pair_is_not_two_of_a_thing(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)


# "couple" names two people ("a gift for a couple") as often as it counts, and "a couple of days" is a few;
# "single" says unmarried or one-person ("a single parent", "a single room"), not one of a thing; "none" is
# a negation ("none of my plants grow"), not the number 0. None of them is a number word: "a gift for a
# couple" is not "a gift for two", nor "a single parent" "one parent".
@pytest.mark.parametrize("text, words", [
    ("What gift should I get for a couple?", ["what", "gift", "should", "i", "obtain", "for", "coupl"]),
    ("Can I travel as a single parent?", ["can", "i", "travel", "as", "singl", "parent"]),
    ("Why do none of my plants grow?", ["why", "none", "my", "plant", "grow"]),
])
def test_couple_single_and_none_are_no_numbers(text, words):
    assert canon(text) == words


@pytest.mark.parametrize("a, b", [
    ("What gift should I get for a couple?", "What gift should I get for two?"),
    ("Can I travel abroad as a single parent?", "Can I travel abroad as one parent?"),
    ("Is a single room enough for a family?", "Is one room enough for a family?"),
    ("Is it ok to stay a couple of days?", "Is it ok to stay three days?"),
])
def test_couple_and_single_are_not_two_and_one(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)


def test_none_is_a_negation():
    assert guard.mismatch("Why do none of my plants grow?", "Why do all of my plants grow?") == "negation"


# "first" before a noun is an ordinal ("the first layer" / "the 1st layer"); as an adverb ("which goes
# first", "what should I do first") it is no number: a rewording that orders the same things another way
# is then a word more or less for the contextual check (and a judge), not a hard "number" no judge may overrule.
@pytest.mark.parametrize("text, words", [
    ("Why is my first layer not sticking?", ["why", "my", "1", "layer", "not", "stick"]),
    ("Is the first day free?", ["1", "day", "fre"]),
    ("Is the rent due on the first?", ["rent", "due", "on", "1"]),  # after a determiner: the first (day)
    ("What should I do first?", ["what", "should", "i", "first"]),
    ("Sunscreen or moisturizer: which goes first?", ["sunscreen", "or", "moisturizer", "what", "goe", "first"]),
])
def test_first_is_an_ordinal_only_before_a_noun(text, words):
    assert canon(text) == words


@pytest.mark.parametrize("a, b", [
    ("Should I put on moisturizer before or after sunscreen?", "Sunscreen and moisturizer: which one goes first?"),
    ("Does moisturizer go on before sunscreen or after it?", "Sunscreen and moisturizer: which one goes first?"),
])
def test_first_as_an_adverb_is_no_number(a, b):
    assert guard.mismatch(a, b) != "number" and guard.mismatch(b, a) != "number"


@pytest.mark.parametrize("a, b", [
    ("What should I do first?", "What should I do?"),  # a scope added: still another question
    ("Why is my first layer not sticking?", "Why is my last layer not sticking?"),
    ("Why is my first layer not sticking?", "Why is my second layer not sticking?"),
])
def test_first_keeps_what_else_changed(encoder, a, b):
    assert not served(encoder, a, b) and not served(encoder, b, a)
