"""What kind of question a cache entry answers: volatile, code or general (arXiv 2510.26835).

How long an answer stays true depends on the question: a price, a score, the weather or anything
asked "today" / "right now" / "latest" is stale within minutes; how to reset a router or write a
function holds for months. `classify` names the kind from a few precompiled patterns (no model,
a few microseconds: bench/category_cost.py), so a cache can give each kind its own TTL and threshold
(`models.<alias>.cache.categories`, app/config).

- volatile: the answer depends on when it is asked: time words ("today", "right now", "this week",
  "tonight", "currently", "latest"), "current" before a time-bound noun ("current price", "current
  president"; never "electric current" or "current directory"), live prices and exchange rates,
  scores and results, weather and forecasts, news, opening hours ("is the pharmacy open"), and
  "latest version of" software.
- code: a code block, a stack trace, a code-like line, or a request to write / fix / explain a
  function, script, query or the like, or a how-to "in Python" (or another language). Code wins
  over time words ("a function that returns today's date" is code: its answer does not age), but
  not over "latest version of" (the answer to that does).
- general: everything else.

Quoted text ("...", “...”, '...') and code are removed before the time words are read: a question
about the phrase "today is a gift" is not about today. A false "volatile" costs only cache life (a
shorter TTL); a missed one can serve a stale answer, so the rules lean to volatile where a word is
about time. Known misses (README, "Question categories"): time implied without a time word ("Who is
the president of France?", "How old is Taylor Swift?", "Is it raining in Oslo?"), relative dates
("last Friday", "in two days"), other languages, and follow-ups whose time word is in an earlier turn
are caught only where the caller classifies those turns too (app/cache/service.py does), and only in
the recent ones (EARLIER_MAX_TURNS, EARLIER_MAX_CHARS).
"""

from __future__ import annotations

import re
from enum import StrEnum


class Category(StrEnum):
    VOLATILE = "volatile"
    CODE = "code"
    GENERAL = "general"


# Only the start of a long prompt is read, as much as the semantic cache's embedder reads
# (app/cache/embedder.py WINDOW_CHARS): the rules look for signals, not proof, and a pasted file must
# not cost milliseconds on every request (bench/category_cost.py).
MAX_CHARS = 2048
# A general follow-up's earlier user turns are read newest first, this many and this much text in all:
# a follow-up asks what its conversation recently asked, and a conversation of hundreds of turns (every
# one classified, on every request) cost a classification per turn: 64 turns of 2,048 characters took
# 96 ms of the event loop per request (session notes t29v).
EARLIER_MAX_TURNS = 8
EARLIER_MAX_CHARS = 2 * MAX_CHARS

# Languages and tools named after "in", "with" or "using" ("in Python"): none that is also a common
# word there ("in assembly", "with a flask", "in go", "in r").
_LANGS = (r"python|javascript|typescript|java|kotlin|swift|rust|golang|ruby|php|perl|scala|haskell|c\+\+|c#|"
          r"bash|powershell|sql|postgres(?:ql)?|mysql|sqlite|node\.?js|django|numpy|regex|html|css|jquery|matlab|"
          r"lua|elixir|clojure|fortran|cobol|vba|excel formulas?|git|docker|kubernetes|terraform|ansible")
_CODE_ARTIFACTS = (r"function|script|snippet|code|regex|regular expression|query|unit tests?|decorator|lambda|"
                   r"one-liner|stack ?trace|traceback|dockerfile|makefile|compiler error|syntax error|segfault|"
                   r"sql|api endpoint|shell command|bash command|cron (?:job|expression)")
# Words that are code only after a programming verb: "write a class", not "explain the class system".
_ARTIFACTS = _CODE_ARTIFACTS + r"|class|method|program|algorithm|loop|bug|recursion|test case"

# Case-sensitive code evidence: a fence, a traceback, a statement that only code looks like.
_CODE_RAW = re.compile(
    r"```|~~~"
    r"|Traceback \(most recent call last\)"
    r"|\bFile \"[^\"]+\", line \d+"
    r"|^\s*at [\w.$<>]+\([\w.]*:\d+(?::\d+)?\)"  # a Java or JavaScript stack frame
    r"|[a-z](?:Error|Exception)(?::|\s+at\b)"  # KeyError: ..., NullPointerException at ...
    # A SELECT's scan for its FROM stops at the next SELECT: else "SELECT " x 400 with no FROM took 6 ms.
    r"|\bSELECT\b(?:[^;S]|S(?!ELECT\b))*?\bFROM\b|\bINSERT INTO\b|\bCREATE TABLE\b"
    r"|^\s*(?:def|class|import|from \S+ import|#include|package|using namespace|fn|func|public|private)\b.*[(:{;<]"
    r"|\bconsole\.log\(|\bSystem\.out\.|\bprintf\(|\.\w+\([^()\n]*\)\s*;?\s*$|=>\s*\{|\)\s*\{\s*$",
    re.MULTILINE,
)
_CODE_MARKS = ("(", "{", ";", "<", ":", "\"", "`", "~~~")
_CODE_KEYWORDS = ("Error", "Exception", "SELECT", "INSERT INTO", "CREATE TABLE")
# Lower-cased code requests.
_CODE_WORDS = re.compile(
    rf"\b(?:write|implement|code|fix|debug|refactor|optimi[sz]e|rewrite|port)\b(?:\s+(?:me|us))?(?:\s+\S+){{0,4}}?"
    rf"\s+(?:{_ARTIFACTS})\b"
    rf"|\b(?:explain|review|generate|create|make|convert|translate|test|speed up)\b(?:\s+(?:me|us))?(?:\s+\S+){{0,4}}?"
    rf"\s+(?:{_CODE_ARTIFACTS})\b"
    rf"|\b(?:in|with|using)\s+(?:{_LANGS})(?![\w+#-])"
    rf"|\b(?:{_LANGS})\s+(?:{_ARTIFACTS}|error|exception|package|module|library|list|dict|dictionary|array|string|"
    rf"dataframe|variable|syntax|table|database|column|index|commit|branch|container|image)\b"
    rf"|\bgit\s+(?:commit|rebase|merge|branch|push|pull|checkout|reset|revert|stash|diff|clone|cherry-pick|ignore|tag|log|status|add)\b"
    rf"|\b(?:segmentation fault|null pointer|nullpointerexception|undefined is not a function|off-by-one|"
    rf"compile error|index out of range)\b",
)

# "latest version of" beats code: the answer to it ages whatever the subject.
_VERSION = re.compile(
    r"\b(?:latest|newest|current|most recent|last)\s+(?:stable\s+|lts\s+)?(?:version|release|update|build|"
    r"patch|firmware|driver|model)s?\b"
    r"|\b(?:version|release)\s+of\s+\S+\s+(?:is\s+)?(?:out|current|latest)\b"
    r"|\bwhen (?:is|will) (?:the )?next\b.{0,40}\b(?:release|launch|update|come out)\b",
)

# Nouns whose "current ..." is time-bound; "current" before anything else (electric current, the
# current directory, the current line) is not a time word.
_CURRENT_NOUNS = (r"price|prices|rate|rates|value|cost|weather|temperature|conditions|score|scores|standings|"
                  r"ranking|rankings|time|date|day|year|month|week|president|prime minister|pm|ceo|leader|leaders|"
                  r"champion|champions|holder|status|news|events|situation|population|record|inflation|market|"
                  r"state of|trend|trends|forecast|traffic|wait time|waiting time|odds|polls?|season|"
                  r"exchange|interest|mortgage|gas|fuel|petrol|stock|share|unemployment|outbreak|covid|case count|"
                  r"leaderboard|top|best|most popular|bestsellers?|number one|no\. ?1|total|balance")
_WEEKDAYS = r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|weekends|holidays?|christmas|new year'?s?"
# A month, a season or "usually": the climate, not today's weather.
_CLIMATE = re.compile(r"\b(?:january|february|march|april|may|june|july|august|september|october|november|december|"
                      r"spring|summer|autumn|fall|winter|usually|typically|average|climate|generally|in general)\b")

_VOLATILE = re.compile(
    rf"\b(?:today|today's|todays|tonight|tonight's|tomorrow|tomorrow's|yesterday|yesterday's|currently|"
    rf"right now|just now|as of now|as we speak|at the moment|at present|presently|so far this|"
    rf"this (?:morning|afternoon|evening|week|weekend|month|year|season)|last night|"
    rf"latest|newest|most recent|trending)\b(?<!\bat the latest)"
    rf"|\blive (?:score|scores|stream|streams|results|updates|coverage|feed|price|prices|traffic|map|odds|blog)\b"
    rf"|\bnow\s*[?.!]*\s*$|\b(?:open|closed|happening|playing|live|trending|available|on sale|in stock|streaming)\s+now\b"
    rf"|\bcurrent\s+(?:\w+\s+)?(?:{_CURRENT_NOUNS})\b"
    rf"|\b(?:stock|share|bitcoin|btc|ethereum|eth|crypto|gold|silver|oil|crude|gas|petrol|diesel|fuel)\s+(?:price|prices|quote|value)\b"
    rf"|\bprice of (?:a |an |one )?(?:bitcoin|btc|ethereum|eth|dogecoin|crypto|gold|silver|oil|crude|gas|petrol|diesel|"
    rf"\w+ stock|\w+ shares?|shares)\b|\bexchange rates?\b|\b(?:usd|eur|gbp|jpy|cny|inr|chf|cad|aud)\s*(?:to|/|in)\s*"
    rf"(?:usd|eur|gbp|jpy|cny|inr|chf|cad|aud)\b|\btrading at\b|\bmarket cap\b|\bhow much is (?:a |one )?"
    rf"(?:bitcoin|btc|ethereum|eth|dollar|euro|pound|yen|share|ounce of gold)\b"
    rf"|\b(?:what'?s|what is) the score\b|\b(?:live|final|latest) scores?\b|\bwho (?:is winning|is leading|won last|won the game|"
    rf"won the match|won tonight|won yesterday|won last night|plays tonight)\b|\bstandings\b|\bleague table\b"
    rf"|\bweather\b|\bforecast\b|\b(?:is it|will it) (?:rain|snow|be sunny|be hot|be cold|be windy|storm)|\btemperature (?:outside|in \w+ now)\b"
    rf"|\bnews\b|\bheadlines\b|\bwhat(?:'s| is) happening\b|\bwhat happened (?:today|yesterday|last night|this week)\b"
    rf"|\b(?:is|are)\s+(?:the\s+)?[\w'&. -]{{1,40}}?\s+(?:still\s+)?(?:open|closed)\b(?![\s-]*(?:source|ended|minded|format|"
    rf"standard|world|book|question|problem|set|interval|loop|circuit))"
    rf"|\bwhat time (?:does|do|is)\b.{{0,40}}\b(?:open|close|closing|opening)\b|\bopening (?:hours|times)\b|\bopen on (?:{_WEEKDAYS})\b"
    rf"|\b(?:business|store|shop|office) hours\b|\bhours of operation\b|\bwait(?:ing)? times?\b|\bdelays?\b.{{0,30}}\b(?:today|now|flight|train)\b",
)
_EXPLICIT_TIME = re.compile(r"\b(?:today|tonight|tomorrow|now|right now|this (?:week|weekend)|currently|current)\b")
# Quoted text: "..." and curly quotes always; '...' only where the quotes are not apostrophes.
# An opening quote's scan stops at the next opening one (“[^”“\n]...): else each of 2,048 unclosed “
# scanned 400 characters, 7 ms a prompt (session notes t29v); quotes do not nest in a question.
_QUOTED = re.compile(r"\"[^\"\n]{0,400}\"|“[^”“\n]{0,400}”|«[^»«\n]{0,400}»|(?<![\w'])'[^'\n]{1,400}'(?![\w'])")
_QUOTES = ("\"", "“", "«", "'")
_FENCED = re.compile(r"```.*?(?:```|$)|~~~.*?(?:~~~|$)|`[^`\n]*`", re.DOTALL)


def classify(text: str) -> Category:
    """The category of one question (the last user turn, or any one turn)."""
    text = text[:MAX_CHARS]
    lower = text.lower()
    # Each pattern is a pass over the text: the removals run only where their characters occur.
    prose = _FENCED.sub(" ", lower) if "`" in lower or "~~~" in lower else lower
    if any(q in prose for q in _QUOTES):
        prose = _QUOTED.sub(" ", prose)
    if _VERSION.search(prose):
        return Category.VOLATILE
    if (_looks_like_code(text) and _CODE_RAW.search(text)) or _CODE_WORDS.search(lower):
        return Category.CODE
    m = _VOLATILE.search(prose)
    if m is None:
        return Category.GENERAL
    if m.group(0) == "weather" and _CLIMATE.search(prose) and not _EXPLICIT_TIME.search(prose):
        # "What is the weather like in Lisbon in May?": the climate, asked of no particular day.
        return Category.GENERAL if not _VOLATILE.search(prose, m.end()) else Category.VOLATILE
    return Category.VOLATILE


def _looks_like_code(text: str) -> bool:
    """Whether _CODE_RAW can match at all: each of its branches needs one of these (a fast scan each),
    and most questions have none, so the pattern's own pass over the text is skipped."""
    return any(c in text for c in _CODE_MARKS) or any(w in text for w in _CODE_KEYWORDS)


def classify_turns(last: str, earlier_user_turns: tuple[str, ...] = ()) -> Category:
    """A conversation's category: its last turn's, or, when that is general, the strongest of the
    recent earlier user turns' (volatile, then code): "And in London?" after "What's the weather in
    Paris today?" asks about today too. The earlier turns are read newest first, at most
    EARLIER_MAX_TURNS of them and EARLIER_MAX_CHARS in all."""
    category = classify(last)
    if category is not Category.GENERAL or not earlier_user_turns:
        return category
    left = EARLIER_MAX_CHARS
    for turn in earlier_user_turns[:-EARLIER_MAX_TURNS - 1:-1]:
        if left <= 0:
            break
        text = turn[:min(left, MAX_CHARS)]
        c = classify(text)
        if c is Category.VOLATILE:
            return c  # nothing outranks it: the older turns are not read
        if c is Category.CODE:
            category = c
        left -= len(text)
    return category
