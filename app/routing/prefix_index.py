"""An approximate index of what each backend holds in its prompt (KV) cache, learned from routing.

No server here publishes KV-cache events, so, as llm-d's approximate prefix scorer does, the gateway
hashes a canonical serialisation of each prompt in blocks of BLOCK_CHARS characters (each key chains
the keys before it, so equal keys mean equal text up to there) and records which backend it sent them
to. Each backend's entries are bounded by its cache capacity (configured, or learned from what it
reports) in LRU order, and expire after a TTL (Dynamo's 120 s by default).

The index is checked against what the backend reports (llama.cpp `timings.cache_n` / `prompt_n`,
`usage.prompt_tokens_details.cached_tokens` from vLLM and OpenAI-compatible servers): a per-backend
accuracy figure scales how much of a predicted match the router believes, and blocks a backend turned
out not to hold are dropped.
"""

from __future__ import annotations

import hashlib
import math
import operator
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

# ~32 tokens of English: small enough that a short question after a shared system prompt still
# matches the whole prompt, large enough that hashing a long conversation costs microseconds.
BLOCK_CHARS = 128
CHARS_PER_TOKEN = 4.0
# Believed share of a predicted match before any report has confirmed or denied one.
PRIOR_ACCURACY = 0.8
_RELEASE = operator.itemgetter(0)  # of a (predicted release, event) user of a prefix copy
# Prompts a taken slot forgot, kept to recognise one reported reused later (a host-memory prompt cache).
FORGOTTEN_ENTRIES = 1024
# What of a prompt pushed out of its slot routing counts on while its server is not known to keep such
# prompts in host memory or to lose them (BackendPrefixes.host_share).
UNKNOWN_HOST_SHARE = 0.5


@dataclass(slots=True)
class PromptBlocks:
    """A request's block keys and its length, computed once per request."""

    keys: list[bytes]
    chars: int
    tokens: float = field(init=False)  # estimated from `chars`, once: each candidate's match scales by it

    def __post_init__(self) -> None:
        self.tokens = self.chars / CHARS_PER_TOKEN

    def tokens_in(self, blocks: int) -> float:
        """Estimated prompt tokens covered by the first `blocks` blocks."""
        return min(blocks * BLOCK_CHARS, self.chars) / CHARS_PER_TOKEN

    @property
    def group(self) -> bytes:
        """What requests sharing a prefix have in common: the first block (the prompt itself if shorter)."""
        return self.keys[0] if self.keys else b""


# Block keys already computed, by what they hash (the key before and the block's bytes): a shared system
# prompt is hashed once, not at every request that carries it. Emptied when full.
_KEYS: dict[bytes, bytes] = {}
KEY_CACHE_ENTRIES = 8192  # ~2 MB: a few hundred 2 KB prompts' blocks


def prompt_blocks(text: str) -> PromptBlocks:
    """The block keys of a prompt's canonical text (the client protocol's `prefix_text`).

    Each key is blake2b of the key before and the block's UTF-8 bytes. A block repeated behind the same
    key (every request's copy of a shared prefix) is looked up rather than hashed again: 2.4 KB of chat
    prompt took 13 us to hash, 4.4 us to look up. ASCII text (one byte a character) is encoded once."""
    keys: list[bytes] = []
    prev = b""
    n = len(text)
    data = text.encode() if text.isascii() else None
    get = _KEYS.get
    for start in range(0, n, BLOCK_CHARS):
        end = start + BLOCK_CHARS
        if end > n and keys:
            break  # a partial last block is not cached by block-based servers
        link = prev + (data[start:end] if data is not None else text[start:end].encode())
        key = get(link)
        if key is None:
            if len(_KEYS) >= KEY_CACHE_ENTRIES:
                _KEYS.clear()
            key = _KEYS[link] = hashlib.blake2b(link, digest_size=12).digest()
        prev = key
        keys.append(key)
    return PromptBlocks(keys, n)


@dataclass(slots=True)
class _Entry:
    seen: float  # when a request carrying this block was last sent here
    written: int  # the backend's token counter when it was: how much has entered its cache since
    ready_at: float  # when its prefill is predicted to be done (a burst sibling waits for it)
    leader: Any = None  # the asyncio.Event set when the request prefilling it got its first token
    # A prompt's first block, on a backend whose cache belongs to a slot (llama.cpp): how many copies
    # of the prefix it is believed to hold, and the requests in flight there using one (predicted
    # release, the event set at it). See BackendPrefixes.occupy.
    copies: int = 0
    users: list[tuple[float, Any]] | None = None
    # Requests sent here carrying this block (two or more: the prompt repeats; one forgotten before and
    # sent again starts at two).
    sent: int = 1


@dataclass
class BackendPrefixes:
    """One backend's believed cache contents, bounded by capacity (tokens, LRU) and a TTL."""

    capacity_tokens: float = 32768.0
    ttl_s: float = 120.0
    # Whether the capacity was configured (then it is never moved by learning).
    fixed_capacity: bool = False
    accuracy: float = PRIOR_ACCURACY
    verified: int = 0  # requests whose reported cached tokens were compared with the index's match
    _blocks: OrderedDict[bytes, _Entry] = field(default_factory=OrderedDict)
    _written: int = 0  # estimated tokens this gateway has sent into the backend's cache
    # On a backend whose cache belongs to a slot: whether the server keeps a prompt pushed out of its slot
    # in host memory (llama.cpp's host-memory prompt cache, --cache-ram, on by default in the builds that
    # have it) or loses it (--cache-ram 0, and builds before it). None until a request for such a prompt
    # says which: no server publishes it (llama.cpp's /props does not). See occupy and verify.
    host_memory: bool | None = None
    _held: dict[bytes, None] = field(default_factory=dict)  # first blocks believed in a slot (copies)
    _hosted: dict[bytes, None] = field(default_factory=dict)  # first blocks whose every copy left its slot
    _forgotten: dict[bytes, None] = field(default_factory=dict)  # first blocks a taken slot forgot
    # `host_memory` was taken from another backend of the fleet (adopt), not from this one's own report:
    # this one's first report still settles it.
    _adopted: bool = False

    def configured_like(self, fresh: BackendPrefixes) -> BackendPrefixes:
        """This index, kept across a config reload, with the settings the new file gives (`fresh`: the
        index it would have built): a configured capacity and the TTL. A learned capacity stays learned."""
        if fresh.fixed_capacity or self.fixed_capacity:
            self.capacity_tokens, self.fixed_capacity = fresh.capacity_tokens, fresh.fixed_capacity
        self.ttl_s = fresh.ttl_s
        return self

    @property
    def slot_bound(self) -> bool:
        """Whether a prompt pushed out of its slot may be gone (its server not known to keep it): what
        pushing one out is charged for (app/routing/latency_aware.py)."""
        return self.host_memory is not True

    @property
    def host_share(self) -> float:
        """How much of a prompt held only in host memory (`in_host_memory`) routing counts on: all of it on
        a server known to keep such prompts, half while that is not known (a guess either way costs one
        cold prefill, and a prompt counted at half still draws its next request home, which says)."""
        return 1.0 if self.host_memory else UNKNOWN_HOST_SHARE

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, keys: list[bytes], now: float) -> tuple[int, float, Any, float]:
        """(blocks, ready_at, leader, turnover): the longest leading run of `keys` believed cached here,
        when the last of them will have been computed (past for a settled prefix), the event that says
        so, and the tokens sent here since the least recently used of them was last used."""
        ready, leader, oldest = 0.0, None, self._written
        get, ttl = self._blocks.get, self.ttl_s
        # Every candidate of every decision walks its index through the prompt's blocks: plain
        # comparisons here, not a min() and a max() call per block (the same results).
        for n, key in enumerate(keys):
            e = get(key)
            if e is None or now - e.seen > ttl:
                break
            if e.leader is not None:
                # Still being prefilled by the request that brought it (whatever its predicted end).
                if e.ready_at > ready:  # noqa: PLR1730 (see above)
                    ready = e.ready_at
                leader = e.leader
            if e.written < oldest:  # noqa: PLR1730 (see above)
                oldest = e.written
        else:
            n = len(keys)
        if n:
            first = self._blocks[keys[0]]
            # _busy_until's first test, inline: a prefix no request uses (every prefix on a backend whose
            # cache is shared) needs no call.
            busy = _busy_until(first) if first.users else None
            if busy is not None and (leader is None or busy[0] > ready):
                ready, leader = busy
        return n, ready, leader, float(self._written - oldest)

    def occupy(self, keys: list[bytes], release_at: float, event: Any, computes: bool, slots: int | None = None) -> None:
        """On a backend whose prompt cache belongs to the slot that computed it (llama.cpp), a request
        sent here holds one copy of its prefix in its slot until it ends (`event` set, predicted at
        `release_at`): a sibling that comes meanwhile finds that copy busy and, when every copy is,
        computes the prefix again in another slot or waits for one to free. `computes`: this request
        computes its own copy (it is not waiting for a busy one), so the backend holds one more after it.

        Seen on llama.cpp with its host-memory prompt cache (issue 24, two servers, three shared system
        prompts, every request dumped): a prompt is loaded from the host cache into a slot, not copied,
        so a sibling sent while the only copy was in a running request's slot was prefilled cold in the
        other slot (cached share 0.09, 1.8-5 s) where the router had counted it warm; that backend's
        index accuracy then fell and the router sent nearly every later request to the other server.

        A copy computed takes a slot, and with `slots` (the server's, known) a server holds no more
        copies than that: past them, the copy in the least recently used free slot is gone (llama.cpp
        gives a prompt it holds nowhere its least recently used idle slot), and its prompt is forgotten
        here once no copy is left. Unforgotten, a backend read as holding every prompt ever sent there:
        on two real llama.cpp servers (--cache-ram 0, 2 slots each, four shared prompts, issue 24)
        each prompt sent to both read as warm on both, every such request found its prompt evicted, and
        the index's accuracy fell to 0.07 and its learned capacity to one block, so the router stopped
        seeing any prefix and spread all four over both servers: 17-31 % of prompt tokens cached in a
        third of the runs, against ~83 % in the rest."""
        if not keys:
            return
        e = self._blocks.get(keys[0])
        if e is None:
            return
        users = [u for u in (e.users or ()) if not u[1].is_set()]
        if computes and len(users) >= e.copies:
            e.copies += 1
            self._held[keys[0]] = None
            self._hosted.pop(keys[0], None)
            if slots:
                self._free_slot(keys[0], slots)
        users.append((release_at, event))
        e.users = users

    def _free_slot(self, taker: bytes, slots: int) -> None:
        """A copy of the prompt whose first block is `taker` took a slot: while more copies are believed
        held than the server has slots, the least recently used prompt with a copy in a free slot loses
        that copy, and with its last one is held in host memory only (`in_host_memory`), or forgotten on a
        server known to lose what leaves a slot (`host_memory` False). With every other copy running, the
        server queues the new one for the slot that frees first, and the copy there is the one lost.

        Kept while they ran (issue 24, bench/llama_sim.py --per-slot, four shared prompts, two slots a
        server), the index read three or four prompts on a two-slot server as held for the rest of a run:
        their siblings were priced warm and went cold, the index's accuracy fell to 0.07-0.4, and the
        router stopped trusting what it did know."""
        held = self._in_slots()
        total = sum(e.copies for _, e in held)
        while total > slots:
            victim = _victim(held, taker)
            if victim is None:
                return  # only copies of this prompt run: the server queues it behind them
            k, e = victim
            e.copies -= 1
            total -= 1
            if not e.copies:  # left in `held` with no copy, which _victim passes over
                del self._held[k]
                if self.host_memory is False:
                    self._forget(k)
                else:
                    self._hosted[k] = None

    def _forget(self, first: bytes) -> None:
        """The prompt whose first block is `first` is gone from the server: its entry goes (the rest of its
        blocks match nothing without the first), and it is kept among the forgotten, to recognise it if
        the server reports it reused after all."""
        del self._blocks[first]
        if len(self._forgotten) >= FORGOTTEN_ENTRIES:
            self._forgotten.clear()
        self._forgotten[first] = None

    def _settle_host_memory(self, keeps: bool) -> None:
        """This backend's own report said whether it keeps a prompt pushed out of its slot (adopt marks a
        kind taken from the fleet instead)."""
        self.host_memory, self._adopted = keeps, False
        if not keeps:
            # The server loses what leaves a slot (--cache-ram 0): so are the prompts believed held so.
            for k in self._hosted:
                if k in self._blocks:
                    self._forget(k)
            self._hosted.clear()

    def adopt(self, keeps: bool) -> None:
        """Another backend of the fleet was found to keep (or lose) a prompt pushed out of its slot: while
        this one has not said, it is taken to be alike (servers of one fleet are as a rule started alike,
        from one chart or command line). Its own first report still settles it either way."""
        if self.host_memory is None:
            self._settle_host_memory(keeps)
            self._adopted = True

    def in_host_memory(self, first: bytes) -> bool:
        """Whether the prompt whose first block is `first` is held, if at all, only in the server's host
        memory: its every copy has left its slot, on a server not known to lose what leaves one."""
        return first in self._hosted

    def _in_slots(self) -> list[tuple[bytes, _Entry]]:
        """The prompts believed in a slot (first block, entry), in the order their first copies were
        taken: the one list _free_slot, pushed_out and copies_besides read. `_held` names exactly the
        entries with copies, since every path that drops an entry or its last copy drops its key too
        (_free_slot, settle, _evict); the test is a guard, not a prune."""
        blocks = self._blocks
        return [(k, e) for k in self._held if (e := blocks.get(k)) is not None and e.copies]

    def record(self, keys: list[bytes], now: float, ready_at: float, leader: Any = None) -> None:
        """The request was sent here: its blocks are (or, by `ready_at`, will be) in the backend's cache."""
        per_block = BLOCK_CHARS / CHARS_PER_TOKEN
        for key in keys:
            e = self._blocks.get(key)
            if e is None:
                self._written += int(per_block)
                e = self._blocks[key] = _Entry(now, self._written, ready_at, leader)
                if key in self._forgotten:
                    e.sent = 2
            else:
                e.seen, e.written, e.sent = now, self._written, e.sent + 1
                if e.leader is not None and ready_at < e.ready_at:
                    e.ready_at, e.leader = ready_at, leader
                self._blocks.move_to_end(key)
        self._evict(now)

    def settle(self, keys: list[bytes], now: float, leader: Any = None, lost: bool = False) -> None:
        """The request that was prefilling these blocks got its first token (or ended): they are
        computed. `lost`: it ended before computing them, so the blocks it brought are forgotten rather
        than counted as held (a later request or a waiting sibling would be priced warm for nothing)."""
        for key in keys:
            e = self._blocks.get(key)
            if e is not None and e.leader is not None and (leader is None or e.leader is leader):
                if lost:
                    del self._blocks[key]
                    self._held.pop(key, None)
                    self._hosted.pop(key, None)
                else:
                    e.ready_at, e.leader = min(e.ready_at, now), None

    def verify(self, predicted_blocks: int, turnover: float | None, reported_share: float, share_per_block: float,
               first: bytes | None = None, hosted: bool = False) -> None:
        """Compare the match predicted at routing time with the share of the prompt the backend says it
        reused: update the accuracy figure and, unless configured, the cache capacity. `turnover` is
        what this gateway had sent into the backend's cache since the matched blocks were last used
        (None: a cache whose entries are lost to a slot taken, not to tokens sent: no capacity figure).
        `first`: the prompt's first block, to tell a prompt a taken slot forgot that came back reused.
        `hosted`: the prompt was believed held in host memory only when the request was routed
        (`in_host_memory`), so its report says whether the server keeps what leaves a slot."""
        predicted_share = min(1.0, predicted_blocks * share_per_block)
        if predicted_share <= 0.0 and reported_share >= 0.5 and first is not None and first in self._forgotten:
            # Forgotten when its slot was taken, yet reused: the server keeps what leaves a slot (llama.cpp's
            # host-memory prompt cache; a server restarted with it). From now on a taken slot forgets nothing.
            self._settle_host_memory(True)
        elif hosted and predicted_share > 0.0 and (self.host_memory is None or self._adopted):
            # The first report of a prompt that had left its slot says what the server does with one. Once
            # known to keep them, one found cold later was dropped by that cache's own bound.
            self._settle_host_memory(reported_share >= 0.5 * predicted_share)
        if predicted_share <= 0.0:
            # The index claimed nothing, so nothing it claimed was wrong. A backend that reused more than
            # this gateway sent it (another gateway replica placed the prefix there, or another client)
            # says nothing about the index's claims; counted as disagreement, it drove a replica's
            # accuracy toward zero exactly where consistent hashing had put a conversation (issue 24
            # item 5), and the replica then ignored what it did know.
            return
        # The accuracy scales a match down; it asks how much of what was claimed the backend held.
        agree = min(predicted_share, reported_share) / predicted_share
        self.verified += 1
        w = 0.2 if self.verified > 5 else 1.0 / self.verified
        self.accuracy = self.accuracy * (1 - w) + agree * w
        if self.fixed_capacity or not predicted_blocks or turnover is None or turnover <= 0:
            return
        if reported_share < 0.5 * predicted_share:
            # Evicted: the backend's cache holds less than what entered it since.
            self.capacity_tokens = max(BLOCK_CHARS / CHARS_PER_TOKEN, min(self.capacity_tokens, turnover))
        elif reported_share >= 0.9 * predicted_share:
            # Kept through all that: the cache holds at least as much.
            self.capacity_tokens = max(self.capacity_tokens, turnover)

    def copies_besides(self, first: bytes | None) -> int:
        """On a backend whose cache belongs to a slot: the copies believed held of prompts other than the
        one whose first block is `first` (the slots they fill)."""
        return sum(e.copies for k, e in self._in_slots() if k != first)

    def pushed_out(self, first: bytes | None) -> bytes | None:
        """On a backend whose cache belongs to a slot: the first block of the prompt a new copy of another
        prompt (`first`'s) would push out, as _free_slot would choose it: the least recently used one in a
        free slot, else the one whose slot frees first (None: none held)."""
        victim = _victim(self._in_slots(), first)
        return victim[0] if victim is not None else None

    def waiting_for(self, first: bytes) -> int:
        """How many requests here wait for a busy copy of the prompt whose first block is `first`: its users
        beyond its copies (siblings held back for a copy, or queued for one, that will reuse it)."""
        e = self._blocks.get(first)
        if e is None or not e.users:
            return 0
        return max(0, sum(1 for u in e.users if not u[1].is_set()) - e.copies)

    def repeated(self, first: bytes) -> bool:
        """Whether the prompt whose first block is `first` came here more than once, or left its slot here
        when another took it, forgotten or held in host memory (it came once at least: held on another
        backend too, or back here, it has come more than once in all)."""
        e = self._blocks.get(first)
        return (e is not None and e.sent > 1) or first in self._forgotten or first in self._hosted

    def copies(self, keys: list[bytes]) -> tuple[int, int]:
        """(copies believed held, of them in use) of the prefix starting with `keys`' first block."""
        e = self._blocks.get(keys[0]) if keys else None
        if e is None:
            return 0, 0
        return e.copies, sum(1 for u in (e.users or ()) if not u[1].is_set())

    def _evict(self, now: float) -> None:
        limit = max(1, math.floor(self.capacity_tokens * CHARS_PER_TOKEN / BLOCK_CHARS))
        # A prompt believed in a slot (`_held`) goes with its entry: kept, every prompt ever sent to a
        # backend whose taken slots forget nothing (a host cache) stayed there.
        held, hosted = self._held, self._hosted
        while len(self._blocks) > limit:
            k = self._blocks.popitem(last=False)[0]
            held.pop(k, None)
            hosted.pop(k, None)
        # Expired entries at the old end go too, so an idle index does not hold memory.
        while self._blocks:
            e = next(iter(self._blocks.values()))
            if now - e.seen <= self.ttl_s:
                break
            k = self._blocks.popitem(last=False)[0]
            held.pop(k, None)
            hosted.pop(k, None)

    def snapshot(self) -> dict:
        return {"blocks": len(self._blocks), "capacity_tokens": round(self.capacity_tokens),
                "capacity": "configured" if self.fixed_capacity else "learned", "ttl_s": self.ttl_s,
                "accuracy": round(self.accuracy, 4), "verified_requests": self.verified,
                # Where the cache belongs to a slot: whether the server keeps a prompt pushed out of its slot
                # (None: not known yet), and whether its own report said so or another backend's.
                "host_memory": self.host_memory,
                "host_memory_from": None if self.host_memory is None else "fleet" if self._adopted else "this backend"}


def _victim(held: list[tuple[bytes, _Entry]], taker: bytes | None) -> tuple[bytes, _Entry] | None:
    """Of the prompts `held` in slots (first block, entry), the one whose copy a new copy of `taker`'s
    prompt takes: the least recently used one with a copy in a free slot, else, with every other copy
    running, the one whose request is predicted to end first (None: only `taker`'s copies run). Ties go
    to the first in `held`. One rule for the slot taken (_free_slot) and for its price (pushed_out): as
    two, they named different prompts where two were last used at the same instant."""
    idle: tuple[float, bytes, _Entry] | None = None
    running: tuple[float, bytes, _Entry] | None = None
    for k, e in held:
        if k == taker or not e.copies:
            continue
        busy = [u[0] for u in (e.users or ()) if not u[1].is_set()]
        if e.copies > len(busy):
            if idle is None or e.seen < idle[0]:
                idle = (e.seen, k, e)
        elif busy:
            end = min(busy)
            if running is None or end < running[0]:
                running = (end, k, e)
    pick = idle or running
    return (pick[1], pick[2]) if pick is not None else None


def _busy_until(e: _Entry) -> tuple[float, Any] | None:
    """When a copy of the prefix whose first block is `e` frees, if every copy is in use now: the
    (users - copies + 1)-th earliest predicted release, and the event set at it.

    A prompt whose last copy a newcomer is queued to take (_free_slot) is still in that slot while its
    request runs: held to one copy until then, not free in host memory at once. Read as free, a sibling
    was priced warm, sent at once, and prefilled cold in the other slot beside the running copy (two real
    llama.cpp servers, eight shared prompts: 1-2 such cold prefills in a 25 s repeat)."""
    if not e.users:
        return None
    copies = e.copies or 1
    users = [u for u in e.users if not u[1].is_set()]
    if len(users) < copies:
        return None
    users.sort(key=_RELEASE)
    return users[len(users) - copies]
