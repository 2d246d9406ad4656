"""The guard serves a repeat only when every content word lines up; any other change is a different question."""

from __future__ import annotations

import pytest

from app.cache.guard import is_typo, mismatch


@pytest.mark.parametrize("a, b, why", [
    ("Turn on the kitchen lights", "Turn off the kitchen lights", "words"),
    ("Should I avoid salt?", "Should I add salt?", "words"),  # an antonym no list names
    # A negating prefix is a negation, which no second opinion may overrule: a 1.5B judge put "legal" /
    # "illegal to drive with headphones" among true rewordings (README, "Semantic cache quality").
    ("Is it safe to eat?", "Is it unsafe to eat?", "negation"),
    ("Is it legal to drive with headphones?", "Is it illegal to drive with headphones?", "negation"),
    ("Do cats like water?", "Do cats dislike water?", "negation"),
    ("Is the loan secured?", "Is the loan unsecured?", "negation"),
    ("Is the ticket refundable?", "Is the ticket nonrefundable?", "negation"),
    # A question frame rewritten on one side only ("Is it possible to" reads "can I") leaves the prefixed
    # word unpaired: still the opposite question.
    ("Is it possible to recover deleted files?", "Is it impossible to recover deleted files?", "negation"),
    ("Is it necessary to tip in Japan?", "Is it unnecessary to tip in Japan?", "negation"),
    ("Is it advisable to run daily?", "Is it inadvisable to run daily?", "negation"),
    ("Am I able to deduct my home office?", "Am I unable to deduct my home office?", "negation"),
    ("Is this ticket refundable?", "Is this ticket non-refundable?", "words"),
    ("Is VAT included?", "Is VAT excluded?", "words"),
    ("Vacation days for full-time staff", "Vacation days for part-time staff", "words"),  # sibling value
    ("How do I make pancakes?", "How do I make vegan pancakes?", "words"),  # added qualifier
    ("Is the feature enabled?", "Is the feature disabled?", "words"),  # inflected opposites
    ("Is the rate increasing?", "Is the rate decreasing?", "words"),
    ("Is the 9 am train late?", "Is the 9 pm train late?", "number"),
    ("How many eggs for 3 people?", "How many eggs for 4 people?", "number"),
    ("How many eggs for three people?", "How many eggs for 4 people?", "number"),
    ("Why does my code not compile?", "Why does my code compile?", "negation"),
    ("I don't want sugar", "I do want sugar", "negation"),
    ("What is the capital of France?", "What is the capital of Germany?", "words"),
    ("Convert 5 km to miles", "Convert 5 miles to km", "role"),
    ("Flights from Paris to London", "Flights from London to Paris", "role"),
    ("Is brown rice healthier than quinoa?", "Is quinoa healthier than brown rice?", "role"),
    ("Does the dog bite the man?", "Does the man bite the dog?", "order"),
    ("What time is it in Tokyo?", "Quelle heure est-il à Tokyo ?", "words"),
    ("Who is the president of France?", "Who was the president of France?", "words"),
    ("Should I steal the idea?", "Should I steel the idea?", "words"),  # two real words are no typo
    ("How do I reset my password?", "How do I reset your password?", "words"),  # whose: not a light word
    ("What is the best laptop?", "What is a laptop?", "words"),  # degree words are never light
    # Filler may come or go on one side only, and never as a qualifier in front of a shared word:
    ("How often should I walk my dog?", "How often should I walk my senior dog?", "words"),
    ("Do I pay tax on dividends?", "Do I pay tax on foreign dividends?", "words"),
    ("Is it safe to walk here?", "Is it safe to walk here at night?", "words"),  # a scope at the end
    ("Is it cold in Oslo?", "Is it cold in Oslo in winter?", "words"),  # a rare word is never filler
    ("Does insurance cover theft?", "Is theft covered by insurance?", "words"),  # a role word is never filler
    ("How do I reset my password?", "How do I reset my password without email?", "negation"),
    # An operator is a word of the question: the tokens once dropped it, and "5 + 3" was served for "5 - 3".
    ("What is 5 + 3?", "What is 5 - 3?", "symbol"),
    ("What is 5 + 3?", "What is 5 * 3?", "symbol"),
    ("What is 10/2?", "What is 10*2?", "symbol"),
    ("Is 7 > 5?", "Is 7 < 5?", "symbol"),
    # So is the symbol that makes a letter a language's name.
    ("How do I print hello world in C?", "How do I print hello world in C++?", "symbol"),
    ("How do I print hello world in C#?", "How do I print hello world in C?", "symbol"),
    # A minus sign before a digit is the number's; a code operator of two symbols is a token where it stands.
    ("Is -5 less than 3?", "Is 5 less than 3?", "number"),
    ("What does x[::-1] do in Python?", "What does x[::1] do in Python?", "number"),
    ("How do I use && in bash?", "How do I use || in bash?", "symbol"),
    # Two nouns, numbers or names the other way round, the words between left in place: the relation's
    # arguments swapped, an inverse answer (one block moved, which the order check lets a rewording do).
    ("How many cups in a gallon?", "How many gallons in a cup?", "role"),
    ("How much is 1 USD in EUR?", "How much is 1 EUR in USD?", "role"),
    ("Is a square a rectangle?", "Is a rectangle a square?", "role"),
    ("What percentage of 80 is 20?", "What percentage of 20 is 80?", "role"),
])
def test_different_questions_are_caught(a, b, why):
    assert mismatch(a, b) == why


@pytest.mark.parametrize("a, b", [
    ("How do I reset my Router?", "how do i reset my router?"),  # case only: not a different name
    ("WHAT IS THE CAPITAL OF FRANCE?", "What is the capital of France?"),
    ("What is 15 % of 80?", "What is fifteen percent of 80?"),
    ("Does it cost $50?", "Does it cost 50 dollars?"),
    ("When did World War 1 end?", "When did the first World War end?"),
    ("Who was the king in 1850?", "Who was the king in 1850"),  # English "was" is not German
    ("What was the GDP of Germany in 2020?", "what was the gdp of germany in 2020?"),
    ("How do I convert a list to a string in Python?", "In Python, how do I convert a list to a string?"),
    ("How do I cook rice?", "What is the best way to cook rice?"),
    ("How do I cook rice?", "Can you tell me how I can cook rice? Thanks!"),
    ("Is the museum open at 9 am?", "Is the museum open at nine a.m.?"),
    ("What is my favourite colour?", "What is my favorite color?"),
    ("How do I organise my photos?", "How do I organize my photos?"),
    ("Is it safe to drive in freezing rain?", "Is it safe to drive in freezng rain?"),  # a typo
    ("How do I buy a car?", "How do I purchase a car?"),  # a true synonym
    ("How do I turn on dark mode?", "How do I enable dark mode?"),
    ("What's the meaning of life?", "What is the meaning of life?"),
    ("Explain how vaccines work", "How do vaccines work?"),  # frame words may come and go
    ("What is the capital of Peru?", "Tell me the capital of Peru"),
    # Common words a rewording adds on one side only, not in front of a word both share:
    ("How do I improve my GPA?", "What can I do to improve my GPA?"),
    ("How often should I change my passwords?", "How often should I change passwords?"),
    ("How do I tune a guitar to drop D?", "How do I tune my guitar to drop D?"),
    ("Is it legal to drive barefoot?", "Can I legally drive barefoot?"),  # a prefix the other side lacks: no opposite
    ("What is 5 x 3?", "What is 5 * 3?"),  # one operator written two ways
    ("What happened in 2020-2021?", "what happened in 2020-2021"),  # a range, not a negative number
    ("Should I use tabs or spaces?", "Should I use spaces or tabs?"),  # the two sides of an "or"
    ("I play mostly blitz.", "I mostly play blitz."),  # an adverb moved, not an argument
])
def test_repeats_pass(a, b):
    assert mismatch(a, b) is None


def test_a_typo_is_one_edit_from_a_known_word():
    assert is_typo("passwrod", "password")
    assert not is_typo("steal", "steel")  # both real words
    assert not is_typo("typical", "atypical")  # a negating prefix is never a typo
    assert not is_typo("pixel8", "pixel9")  # codes and numbers are never typos


@pytest.mark.parametrize("a, b", [
    ("Why is the sky blue?", "What makes the sky blue?"),  # cause
    ("Why do leaves fall?", "What causes leaves to fall?"),
    ("How many legs does a spider have?", "What is the number of legs on a spider?"),  # count
    ("How many bones are in the human body?", "What number of bones are in the human body?"),
    ("Is it safe to eat raw eggs?", "Can I safely eat raw eggs?"),  # manner
    ("Is it legal to record a phone call?", "Can I record a phone call legally?"),
    ("How do I get rid of fruit flies?", "How can I remove fruit flies?"),  # idioms
    ("Is the hotel close to the beach?", "Is the hotel near the beach?"),
    ("How do you say thank you in German?", "What is thank you in German?"),
    ("Why do I wake up at 3 am?", "What's the reason I wake up at 3 am?"),  # cause
    ("How do I stop my cat from scratching the sofa?", "How can I keep my cat from scratching the sofa?"),
    ("How do I stop wood from splitting?", "How do I prevent wood from splitting?"),
    ("Should I do cardio on an empty stomach?", "Is cardio on an empty stomach a good idea?"),  # advice
    ("Should I take vitamin D in winter?", "Is taking vitamin D in winter recommended?"),
    ("Any way to stop a controller from drifting?", "How do I stop my controller from drifting?"),  # "is there" left out
    ("Any tips to get rid of fruit flies?", "How can I get rid of fruit flies?"),
])
def test_question_frames_that_ask_the_same_thing_align(a, b):
    assert mismatch(a, b) is None


@pytest.mark.parametrize("a, b", [
    ("What makes Mars red?", "Why is Venus red?"),  # the frame aligns, the thing asked about does not
    ("What makes the sky blue?", "Why is the sky red?"),
    ("What is the number of moons of Jupiter?", "How many moons does Saturn have?"),
    ("How many rings does Saturn have?", "What is the number of moons of Saturn?"),
    ("Is it safe to swim here?", "Can I swim here?"),  # "safe" is the question
    ("Can I safely park here?", "Is it legal to park here?"),
    ("Can I safely take two Tylenol together?", "Is it safe to take 3 Tylenol at once?"),
    ("How do I get rid of ants?", "How do I attract ants?"),
    ("Is the hotel close to the beach?", "Is the hotel far from the beach?"),
    ("How do you say hello in French?", "What is hello in Spanish?"),
    ("Why do I wake up at 3 am?", "What's the reason I wake up at 4 am?"),
    ("How do I keep my receipts?", "How do I stop my receipts?"),  # "keep" is "stop" only before "from ...ing"
    ("How do I stop my cat from scratching the sofa?", "How can I keep my dog from scratching the sofa?"),
    ("Should I do cardio on an empty stomach?", "Is cardio on an empty stomach a bad idea?"),
    ("Should I do cardio on an empty stomach?", "Is cardio on a full stomach a good idea?"),
    ("Should I take vitamin D in winter?", "Is taking vitamin D in winter dangerous?"),
    ("Any way to stop a controller from drifting?", "How do I stop a controller from lagging?"),
])
def test_a_frame_never_hides_what_changed(a, b):
    assert mismatch(a, b) is not None


@pytest.mark.parametrize("a, b", [
    # A consonant doubled before -ing/-ed is the same verb ("popping" / "pop", "lagging" / "lag").
    ("Why is my phone lagging?", "Why does my phone lag?"),
    ("Why are my prints stopping halfway?", "Why do my prints stop halfway?"),
    # Light words may move when the words that carry the question keep their order.
    ("What temperature should I wash towels at?", "At what temperature should I wash towels?"),
])
def test_inflections_and_moved_light_words_align(a, b):
    assert mismatch(a, b) is None


@pytest.mark.parametrize("a, b", [
    # The same words, subject and object swapped by a person moving: never one block moved.
    ("How can I see who unfollowed me on Instagram?", "How can I see who I unfollowed on Instagram?"),
    ("Why can't people hear me on Zoom?", "Why can't I hear people on Zoom?"),
    # A purr is no pur: a doubled consonant of a real word stays.
    ("Why do cats purr?", "Why do cats pur?"),
    ("Is the frog hopping?", "Is the frog hoping?"),  # nor is "hopping" "hoping" (stems drop an "e")
    # A word and a longer word that starts with it are two words ("universe" / "university").
    ("How old is the universe?", "How old is the university?"),
    ("Is the state office open?", "Is the station office open?"),
    ("Is this plant harmful to cats?", "Is this plant harmless to cats?"),
])
def test_persons_swapped_and_longer_words_are_caught(a, b):
    assert mismatch(a, b) is not None


@pytest.mark.parametrize("a, b", [
    # A person twice ("I ... if I") is no swap of itself, and a clause moved whole keeps its subject.
    ("What should I do if I capsize?", "what should i do if i capsize"),
    ("What should I do if I capsize?", "If I capsize, what should I do?"),
    ("Why do I snore when I sleep?", "When I sleep, why do I snore?"),
])
def test_a_person_twice_and_a_clause_moved_whole_align(a, b):
    assert mismatch(a, b) is None


@pytest.mark.parametrize("a, b", [
    ("What should I do if I capsize?", "What should you do if I capsize?"),
    ("What should I do if I capsize?", "If you capsize, what should I do?"),
    ("Why does she snore when I sleep?", "When she sleeps, why do I snore?"),
    ("Why does she snore when I sleep?", "Why do I snore when she sleeps?"),
])
def test_persons_moved_between_clauses_are_caught(a, b):
    assert mismatch(a, b) is not None


@pytest.mark.parametrize("a, b", [
    # The asker put in place of the one asked: to a chat assistant, "you" is the assistant.
    ("Why do I snore?", "Why do you snore?"),
    ("Do you like pizza?", "Do I like pizza?"),
    ("How old are you?", "How old am I?"),
    ("Are you conscious?", "Am I conscious?"),
    ("Where do you live?", "Where do I live?"),
    ("What is your name?", "What is my name?"),
    ("Should I see a doctor for my cough?", "Should you see a doctor for your cough?"),
    ("Why do I snore so loudly?", "What makes you snore?"),
])
def test_the_asker_and_the_one_asked_swapped_are_a_role(a, b):
    assert mismatch(a, b) == "role"
    assert mismatch(b, a) == "role"


@pytest.mark.parametrize("a, b", [
    # "How do you ..." asks for a way, for anyone.
    ("How do I boil an egg?", "How do you boil an egg?"),
    ("How can I boil an egg?", "How do you boil an egg?"),
    # "We" and "I" are both the asker's side; and a person who was there on both sides stays.
    ("Why do we dream?", "Why do I dream?"),
])
def test_a_generic_you_and_the_askers_own_persons_align(a, b):
    assert mismatch(a, b) is None


@pytest.mark.parametrize("a, b", [
    # A question turned to the assistant with its verb reworded is no swap ("should I use" / "do you
    # recommend"); the guard stays unsure ("words"), for the contextual check to decide.
    ("Which moisturizer should I use?", "What moisturizer do you recommend?"),
    ("What finish should I use?", "Which finish would you recommend?"),
])
def test_a_question_turned_to_the_assistant_is_no_role_swap(a, b):
    assert mismatch(a, b) not in (None, "role")


@pytest.mark.parametrize("a, b", [
    # What may be done is not what must or should be: a hard refusal, whatever the context reads.
    ("Can I tip in Japan?", "Should I tip in Japan?"),
    ("May I bring my dog?", "Must I bring my dog?"),
    ("Can I replace it?", "Do I need to replace it?"),
    ("Is it ok to pop pimples?", "Is it a good idea to pop pimples?"),
    ("Is it possible to retake the exam?", "Do I have to retake the exam?"),
    ("How often can I donate blood?", "How often should I donate blood?"),  # a limit is not advice
])
def test_a_permission_against_an_obligation_or_advice_is_a_modal(a, b):
    assert mismatch(a, b) == "modal"
    assert mismatch(b, a) == "modal"


@pytest.mark.parametrize("a, b", [
    # Necessity asked three ways.
    ("Do I need to file a tax return?", "Must I file a tax return?"),
    ("Do I have to tip in Japan?", "Must I tip in Japan?"),
    ("Is it necessary to register my bike?", "Do I need to register my bike?"),
    ("Is a visa required for Japan?", "Do I need a visa for Japan?"),
    ("Do we need a tent?", "Is a tent necessary?"),
    # An amount or a frequency asked with "should" or "need to" is one number.
    ("How often should I inspect them?", "How frequently do I need to inspect them?"),
    ("How much water do I need to drink a day?", "How much water should I drink a day?"),
    ("How many hours must I sleep?", "How many hours should I sleep?"),
    ("In English, how many words do I need to know?", "How many words should I know in English?"),
])
def test_necessity_and_an_amounts_modal_align(a, b):
    assert mismatch(a, b) is None


def test_a_side_with_both_modals_changes_none():
    # "Can anyone help? ..." (normalisation drops such openers before the guard; here it is kept).
    assert mismatch("How much detergent should I use?", "Can anyone help? How much detergent should I use?") != "modal"


@pytest.mark.parametrize("a, b", [
    ("Is a visa required for Japan?", "Is a visa required for China?"),
    ("Is a visa required for Japan?", "Do I need a passport for Japan?"),
    ("Is a visa required for Japan?", "Is a visa not required for Japan?"),
    ("Is a tent necessary?", "Is a tent unnecessary?"),
    ("Do I need to file a tax return?", "Did I need to file a tax return?"),
    ("How often should I inspect them?", "How often do I need to clean them?"),
    ("Should I tip in Japan?", "Do I need to tip in Japan?"),  # advice and necessity in a yes/no question: unsure
])
def test_necessity_keeps_what_is_needed(a, b):
    assert mismatch(a, b) is not None


@pytest.mark.parametrize("a, b", [
    ("Can I transfer credits to another university?", "Is it possible to transfer my credits to a different university?"),
    ("Is there another way to sign in?", "Is there a different way to sign in?"),
    ("When is the next total solar eclipse?", "When will the next total solar eclipse happen?"),
    ("When is the meteor shower?", "When does the meteor shower occur?"),
    ("Where is the 2028 Olympics?", "Where will the 2028 Olympics take place?"),
    ("When is the parade?", "When is the parade happening?"),
])
def test_another_and_an_event_asked_with_a_verb_of_occurrence_align(a, b):
    assert mismatch(a, b) is None


@pytest.mark.parametrize("a, b", [
    ("Can I transfer credits to another university?", "Can I transfer credits to the same university?"),
    ("When is the next total solar eclipse?", "When did the last total solar eclipse happen?"),
    ("When is the next total solar eclipse?", "When did the next total solar eclipse happen?"),  # the tense
    ("When is the next solar eclipse?", "When will the next lunar eclipse happen?"),
    ("When is the parade?", "When does the parade end?"),  # an end is no occurrence
    ("Where is the concert?", "Where will the concert be streamed?"),
])
def test_another_and_an_event_keep_what_else_changed(a, b):
    assert mismatch(a, b) is not None


@pytest.mark.parametrize("a, b", [
    # A topic first, taken up again by a pronoun: the question with the topic in the pronoun's place.
    ("How many hours of sleep does a teenager need?", "Teenagers: how many hours of sleep do they need?"),
    ("Can my dog eat grapes?", "Grapes: can my dog eat them?"),
    ("How do I install Python?", "Python: how do I install it?"),
    # "What is causing" is "what causes" (the frame's progressive).
    ("Why is my browser so slow?", "What's causing my browser to be so slow?"),
    ("Why do my knees hurt?", "What is making my knees hurt?"),
])
def test_a_topic_first_and_a_cause_asked_in_the_progressive_align(a, b):
    assert mismatch(a, b) is None


@pytest.mark.parametrize("a, b", [
    ("Can my dog eat grapes?", "Grapes: can my cat eat them?"),
    ("Can my dog eat grapes?", "Raisins: can my dog eat them?"),
    ("How do I install Python?", "Python: how do I uninstall it?"),
    ("How do I install Python?", "Python: it is installed, how do I update it?"),  # two pronouns: no rewrite
    ("Quick question: how do I reset it?", "How do I reset the router?"),  # a frame, not a topic
    ("Why is my browser so slow?", "What's causing my browser to be so fast?"),
])
def test_a_topic_first_keeps_what_else_changed(a, b):
    assert mismatch(a, b) is not None


@pytest.mark.parametrize("a, b", [
    ("Can I also use vitamin C?", "Is it okay to use vitamin C as well?"),
    ("Can I also use vitamin C?", "Can I use vitamin C too?"),
    ("Should I also water the roots?", "Should I water the roots, too?"),
])
def test_an_additive_particle_after_the_question_is_also(a, b):
    assert mismatch(a, b) is None


@pytest.mark.parametrize("a, b", [
    ("Can I also use vitamin C?", "Can I use retinol too?"),
    ("Is it late to plant tulips?", "Is it too late to plant tulips?"),  # "too" before a word is a degree
    ("Can I also use vitamin C?", "Can I not use vitamin C as well?"),
])
def test_an_additive_particle_keeps_what_else_changed(a, b):
    assert mismatch(a, b) is not None
