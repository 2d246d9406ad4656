"""The approximate prefix index: canonical blocks, LRU and TTL bounds, and checking against reports."""

from __future__ import annotations

import asyncio
import hashlib
import random

from app.protocols import CHAT, COMPLETIONS
from app.routing import prefix_index
from app.routing.prefix_index import BLOCK_CHARS, BackendPrefixes, prompt_blocks


def blocks_of(body: dict):
    """The block keys of a request body, as dispatch computes them (the protocol's canonical text)."""
    protocol = COMPLETIONS if "prompt" in body else CHAT
    return prompt_blocks(protocol.prefix_text(body))


SYSTEM = "You answer questions about the billing system. " * 20


def chat(*turns: tuple[str, str], tools=None) -> dict:
    body = {"messages": [{"role": r, "content": c} for r, c in turns]}
    if tools:
        body["tools"] = tools
    return body


def test_prompts_sharing_a_system_prompt_share_leading_blocks():
    a = blocks_of(chat(("system", SYSTEM), ("user", "What is my balance?")))
    b = blocks_of(chat(("system", SYSTEM), ("user", "When is it due?")))
    shared = len(SYSTEM) // BLOCK_CHARS
    assert a.keys[:shared] == b.keys[:shared]
    # Only full blocks are keyed (block-based caches keep no partial block): the questions are not.
    assert a.tokens_in(len(a.keys)) < a.tokens


def test_a_conversations_next_turn_extends_the_previous_one():
    turn1 = chat(("system", SYSTEM), ("user", "Hello " * 30))
    turn2 = chat(("system", SYSTEM), ("user", "Hello " * 30), ("assistant", "Hi, how can I help?"), ("user", "My bill."))
    k1, k2 = blocks_of(turn1).keys, blocks_of(turn2).keys
    assert k2[:len(k1) - 1] == k1[:-1]


def test_roles_tools_and_order_are_part_of_the_prefix():
    as_user = blocks_of(chat(("user", SYSTEM)))
    as_system = blocks_of(chat(("system", SYSTEM)))
    assert as_user.keys[0] != as_system.keys[0]
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    assert blocks_of(chat(("system", SYSTEM), tools=tools)).keys[0] != as_system.keys[0]


def test_completions_hash_the_prompt_text():
    assert COMPLETIONS.prefix_text({"prompt": "abc"}) == "abc"
    assert blocks_of({"prompt": "x" * (3 * BLOCK_CHARS)}).keys == blocks_of({"prompt": "x" * (3 * BLOCK_CHARS) + "y"}).keys


def _hashed(text: str) -> list[bytes]:
    """The block keys by their definition: each block's bytes hashed after the key before, every time."""
    keys: list[bytes] = []
    prev = b""
    for start in range(0, len(text), BLOCK_CHARS):
        chunk = text[start:start + BLOCK_CHARS]
        if len(chunk) < BLOCK_CHARS and keys:
            break
        prev = hashlib.blake2b(prev + chunk.encode(), digest_size=12).digest()
        keys.append(prev)
    return keys


def test_keys_looked_up_are_the_keys_hashed(monkeypatch):
    # Blocks seen before are looked up, not hashed again (issue 24: the router's cost per request); the
    # keys must be exactly the hashed ones, for ASCII and other text, whole and partial last blocks, and
    # across the lookup table filling up and emptying.
    monkeypatch.setattr(prefix_index, "KEY_CACHE_ENTRIES", 40)
    rng = random.Random(7)
    alphabet = "abc de\n{}\"" + "\u00e9\u4e2d\U0001f600"
    shared = [SYSTEM, "".join(rng.choice(alphabet) for _ in range(700))]
    for _ in range(300):
        text = rng.choice(shared)[: rng.randrange(0, 700)] + "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 300)))
        got = prompt_blocks(text)
        assert got.keys == _hashed(text) and got.chars == len(text)
    assert len(prefix_index._KEYS) <= 40


def test_match_is_the_longest_leading_run_recorded_on_that_backend():
    idx = BackendPrefixes()
    a = blocks_of(chat(("system", SYSTEM), ("user", "one")))
    b = blocks_of(chat(("system", SYSTEM), ("user", "two")))
    idx.record(a.keys, now=0, ready_at=0)
    blocks, *_ = idx.match(b.keys, now=1)
    assert blocks == len(SYSTEM) // BLOCK_CHARS
    assert idx.match(a.keys, now=1)[0] == len(a.keys)


def test_entries_expire_after_the_ttl():
    idx = BackendPrefixes(ttl_s=120)
    keys = blocks_of(chat(("system", SYSTEM))).keys
    idx.record(keys, now=0, ready_at=0)
    assert idx.match(keys, now=100)[0] == len(keys)
    assert idx.match(keys, now=121)[0] == 0


def test_capacity_bounds_entries_least_recently_used_first():
    per_prompt = 10 * BLOCK_CHARS // 4  # tokens in a 10-block prompt
    idx = BackendPrefixes(capacity_tokens=2 * per_prompt, fixed_capacity=True)
    prompts = [blocks_of({"prompt": str(i) * (10 * BLOCK_CHARS)}).keys for i in range(3)]
    idx.record(prompts[0], 0, 0)
    idx.record(prompts[1], 1, 1)
    idx.match(prompts[0], 2)
    idx.record(prompts[0], 2, 2)  # used again: now the most recent
    idx.record(prompts[2], 3, 3)  # evicts the least recently used: prompt 1
    assert idx.match(prompts[0], 4)[0] == 10
    assert idx.match(prompts[1], 4)[0] == 0
    assert len(idx) == 20


def test_accuracy_falls_when_reports_deny_predicted_hits_and_recovers_when_they_confirm():
    idx = BackendPrefixes()
    for _ in range(10):
        idx.verify(predicted_blocks=10, turnover=100, reported_share=0.0, share_per_block=0.1)
    assert idx.accuracy < 0.1
    for _ in range(10):
        idx.verify(predicted_blocks=10, turnover=100, reported_share=0.95, share_per_block=0.1)
    assert idx.accuracy > 0.8
    assert idx.verified == 20


def test_a_backend_holding_more_than_the_index_claimed_does_not_lower_its_accuracy():
    # Another gateway replica (or another client) put the prefix there: this index claimed nothing, or
    # less than was found, and none of its claims was wrong.
    idx = BackendPrefixes()
    before = idx.accuracy
    for _ in range(10):
        idx.verify(predicted_blocks=0, turnover=100, reported_share=0.9, share_per_block=0.1)
    assert idx.accuracy == before and idx.verified == 0
    for _ in range(10):
        idx.verify(predicted_blocks=3, turnover=100, reported_share=0.9, share_per_block=0.1)
    assert idx.accuracy > 0.99
    # Claimed more than was held: that still counts against it, by the share of the claim not found.
    idx.verify(predicted_blocks=10, turnover=100, reported_share=0.25, share_per_block=0.1)
    assert 0.8 * 0.99 + 0.2 * 0.25 - 0.01 < idx.accuracy < 0.8 + 0.2 * 0.25 + 0.01


def test_a_denied_hit_teaches_a_smaller_capacity_and_a_kept_one_a_larger():
    idx = BackendPrefixes(capacity_tokens=32768)
    idx.verify(predicted_blocks=10, turnover=5000, reported_share=0.0, share_per_block=0.1)
    assert idx.capacity_tokens == 5000
    idx.verify(predicted_blocks=10, turnover=8000, reported_share=1.0, share_per_block=0.1)
    assert idx.capacity_tokens == 8000


def test_a_configured_capacity_is_never_learned_over():
    idx = BackendPrefixes(capacity_tokens=4096, fixed_capacity=True)
    idx.verify(predicted_blocks=10, turnover=500, reported_share=0.0, share_per_block=0.1)
    assert idx.capacity_tokens == 4096


def test_a_pending_prefix_names_its_leader_until_settled():
    idx = BackendPrefixes()
    keys = blocks_of(chat(("system", SYSTEM))).keys
    leader = object()
    idx.record(keys, now=0, ready_at=3.0, leader=leader)
    _, ready_at, who, _ = idx.match(keys, now=1)
    assert ready_at == 3.0 and who is leader
    idx.settle(keys, now=1.5, leader=leader)
    _, ready_at, who, _ = idx.match(keys, now=2)
    assert who is None


def test_a_slot_scoped_copy_in_use_is_busy_until_its_holder_ends():
    # llama.cpp keeps a prompt in the slot that ran it (or in its host cache, not both): while the only
    # copy is in a running request's slot, a sibling finds none free.
    idx = BackendPrefixes()
    keys = blocks_of(chat(("system", SYSTEM), ("user", "first"))).keys
    idx.record(keys, now=0, ready_at=0.0)
    holder = asyncio.Event()
    idx.occupy(keys, release_at=4.0, event=holder, computes=True)
    blocks, ready_at, who, _ = idx.match(keys, now=1)
    assert blocks == len(keys) and ready_at == 4.0 and who is holder
    holder.set()
    _, _, who, _ = idx.match(keys, now=2)
    assert who is None and idx.copies(keys) == (1, 0)


def test_a_sibling_that_computed_its_own_copy_leaves_one_free_for_the_next():
    idx = BackendPrefixes()
    keys = blocks_of(chat(("system", SYSTEM), ("user", "first"))).keys
    idx.record(keys, now=0, ready_at=0.0)
    first, second, third = asyncio.Event(), asyncio.Event(), asyncio.Event()
    idx.occupy(keys, release_at=4.0, event=first, computes=True)
    idx.occupy(keys, release_at=3.0, event=second, computes=True)  # sent at once: prefilled it again
    assert idx.copies(keys) == (2, 2)
    assert idx.match(keys, now=1)[2] is second  # both busy: the copy that frees first
    second.set()
    assert idx.match(keys, now=3.5)[2] is None  # one of two free
    idx.occupy(keys, release_at=5.0, event=third, computes=False)  # reused the free one
    assert idx.copies(keys) == (2, 2) and idx.match(keys, now=3.6)[2] is first


def _computed(idx: BackendPrefixes, keys: list[bytes], now: float, slots: int = 2) -> asyncio.Event:
    """A request sent at `now` computed its own copy of `keys`' prefix in a slot; the event ends it."""
    idx.record(keys, now=now, ready_at=now)
    end = asyncio.Event()
    idx.occupy(keys, release_at=now + 1.0, event=end, computes=True, slots=slots)
    return end


def test_a_slot_scoped_backend_holds_no_more_prompts_than_it_has_slots():
    # llama.cpp (--cache-ram 0, 2 slots) keeps one prompt per slot: a third prompt computed there takes
    # the least recently used free slot, and the prompt it held is gone (its first block is forgotten).
    idx = BackendPrefixes(host_memory=False)
    p0, p1, p2, p3 = (blocks_of(chat(("system", f"Policy {k}. " + SYSTEM), ("user", "q"))).keys for k in range(4))
    _computed(idx, p0, now=0.0).set()
    _computed(idx, p1, now=1.0).set()
    assert idx.match(p0, now=2.0)[0] == len(p0) and idx.match(p1, now=2.0)[0] == len(p1)
    _computed(idx, p2, now=2.0).set()
    assert idx.match(p0, now=3.0)[0] == 0  # the least recently used: its slot was taken
    assert idx.match(p1, now=3.0)[0] == len(p1) and idx.match(p2, now=3.0)[0] == len(p2)
    # A copy in a running request's slot is not the one taken, however long ago it was placed.
    running = _computed(idx, p1, now=4.0)  # p1 again: its free copy is reused, not computed anew
    assert idx.copies(p1) == (1, 1)
    _computed(idx, p3, now=5.0)
    assert idx.match(p1, now=5.5)[0] == len(p1) and idx.match(p2, now=5.5)[0] == 0
    running.set()
    # Without the slots known, nothing is forgotten (the index's capacity and TTL alone bound it).
    free = BackendPrefixes()
    for k, keys in enumerate((p0, p1, p2, p3)):
        _computed(free, keys, now=float(k), slots=0).set()
    assert all(free.match(keys, now=4.0)[0] == len(keys) for keys in (p0, p1, p2, p3))


def test_a_copy_computed_while_every_slot_runs_takes_the_slot_that_frees_first():
    # llama.cpp (--cache-ram 0, 2 slots) queues a request that finds every slot running and gives it the
    # first slot to free: the prompt there is gone when that request ends, as surely as an idle one's.
    # Kept, a two-slot server read as holding three or four prompts for the rest of a run (issue 24).
    idx = BackendPrefixes(host_memory=False)
    p0, p1, p2 = (blocks_of(chat(("system", f"Policy {k}. " + SYSTEM), ("user", "q"))).keys for k in range(3))
    _computed(idx, p1, now=0.0)  # runs until 1.0
    _computed(idx, p0, now=0.5)  # runs until 1.5
    _computed(idx, p2, now=0.6)  # queued: it takes p1's slot at 1.0
    assert idx.match(p1, now=0.7)[0] == 0
    assert idx.match(p0, now=0.7)[0] == len(p0) and idx.match(p2, now=0.7)[0] == len(p2)
    assert idx.copies_besides(None) == 2
    # With only copies of its own prompt running, the newcomer waits behind them and forgets nothing.
    own = BackendPrefixes()
    _computed(own, p0, now=0.0)
    _computed(own, p0, now=0.1)
    _computed(own, p0, now=0.2)
    assert own.copies(p0) == (3, 3)


def test_a_prompt_sent_more_than_once_reads_as_repeated_even_after_a_slot_forgot_it():
    idx = BackendPrefixes(host_memory=False)
    p0, p1, p2 = (blocks_of(chat(("system", f"Policy {k}. " + SYSTEM), ("user", "q"))).keys for k in range(3))
    _computed(idx, p0, now=0.0).set()
    assert not idx.repeated(p0[0])
    idx.record(p0, now=1.0, ready_at=1.0)
    assert idx.repeated(p0[0])
    _computed(idx, p1, now=2.0).set()
    assert idx.pushed_out(p2[0]) == p0[0]  # the least recently used prompt in a free slot
    _computed(idx, p2, now=3.0).set()
    assert idx.match(p0, now=3.5)[0] == 0 and idx.repeated(p0[0])  # forgotten, and it came twice
    _computed(idx, p0, now=4.0).set()
    assert idx.repeated(p0[0])  # back again: a repeat, not a first visit


def test_a_prompt_that_left_its_slot_for_host_memory_reads_as_repeated_as_a_forgotten_one_did():
    # latency_aware charges a placement the whole prefill of a prompt it pushes out that repeats; a prompt
    # that left a slot here came once at least, whether the server forgot it or keeps it in host memory.
    idx = BackendPrefixes()
    p0, p1, p2 = (blocks_of(chat(("system", f"Policy {k}. " + SYSTEM), ("user", "q"))).keys for k in range(3))
    for k, keys in enumerate((p0, p1, p2)):
        _computed(idx, keys, now=float(k)).set()
    assert idx.in_host_memory(p0[0]) and idx.repeated(p0[0]) and not idx.repeated(p1[0])


def test_a_prompt_reused_after_its_slot_was_taken_says_the_server_keeps_what_leaves_a_slot():
    # llama.cpp's host-memory prompt cache (--cache-ram) keeps a prompt pushed out of its slot and brings
    # it back: on a backend believed to forget one, a prompt forgotten here and then reported reused turns
    # forgetting off for that backend.
    idx = BackendPrefixes(host_memory=False)
    p0, p1, p2, p3 = (blocks_of(chat(("system", f"Policy {k}. " + SYSTEM), ("user", "q"))).keys for k in range(4))
    for k, keys in enumerate((p0, p1, p2)):
        _computed(idx, keys, now=float(k)).set()
    assert idx.match(p0, now=3.0)[0] == 0
    # Another prompt, never forgotten, reused beyond the index's claim: another replica's, no evidence.
    idx.verify(predicted_blocks=0, turnover=None, reported_share=0.9, share_per_block=0.05, first=p3[0])
    assert idx.host_memory is False
    idx.verify(predicted_blocks=0, turnover=None, reported_share=0.9, share_per_block=0.05, first=p0[0])
    assert idx.host_memory is True
    _computed(idx, p0, now=3.0).set()
    _computed(idx, p3, now=4.0).set()
    assert all(idx.match(keys, now=5.0)[0] == len(keys) for keys in (p0, p1, p2, p3))


def test_a_prompt_pushed_out_of_its_slot_is_counted_at_half_until_its_server_says_what_it_keeps():
    # llama.cpp keeps a prompt pushed out of its slot in host memory (--cache-ram, on by default in the
    # builds that have it) or loses it (--cache-ram 0), and publishes neither. Forgotten at once, a prompt
    # still held read as cold at home and went cold to the other server (two real servers, eight shared
    # prompts, two slots each: 5-8 such spills in a 25 s repeat); kept whole, a server that lost it drew
    # its next request to a cold prefill. Counted at half, it draws that request home, whose report says.
    p0, p1, p2, p3 = (blocks_of(chat(("system", f"Policy {k}. " + SYSTEM), ("user", "q"))).keys for k in range(4))
    for reused, keeps in ((0.05, False), (0.95, True)):
        idx = BackendPrefixes()
        for k, keys in enumerate((p0, p1, p2)):
            _computed(idx, keys, now=float(k)).set()
        assert idx.match(p0, now=3.0)[0] == len(p0) and idx.in_host_memory(p0[0]) and idx.host_share == 0.5
        assert idx.copies(p0) == (0, 0) and idx.copies_besides(None) == 2  # in no slot
        _computed(idx, p0, now=3.0).set()  # back in a slot (p1's, the least recently used)
        assert not idx.in_host_memory(p0[0]) and idx.in_host_memory(p1[0])
        _computed(idx, p3, now=4.0).set()  # pushes p2 out too
        idx.verify(predicted_blocks=len(p0), turnover=None, reported_share=reused, share_per_block=0.05,
                   first=p0[0], hosted=True)
        assert idx.host_memory is keeps
        # Lost, every prompt believed in host memory goes; kept, each counts whole.
        assert [idx.match(k, now=5.0)[0] == len(k) for k in (p1, p2)] == [keeps, keeps]
        assert idx.host_share == 1.0 or not keeps
        assert idx.match(p0, now=5.0)[0] == len(p0) and idx.match(p3, now=5.0)[0] == len(p3)  # the slots' own


def test_a_prompt_whose_slot_a_queued_copy_takes_is_busy_until_the_request_running_there_ends():
    # With both slots running, a third prompt's request waits for the first slot to free and takes it: the
    # prompt there leaves it then, not now. Read as free in host memory at once, a sibling was priced warm,
    # sent, and prefilled cold in the other slot beside the running copy (two real llama.cpp servers,
    # eight shared prompts: 1-2 such cold prefills in a 25 s repeat).
    idx = BackendPrefixes()
    p0, p1, p2 = (blocks_of(chat(("system", f"Policy {k}. " + SYSTEM), ("user", "q"))).keys for k in range(3))
    end0 = _computed(idx, p0, now=0.0)  # runs until 1.0
    _computed(idx, p1, now=0.5)  # runs until 1.5
    _computed(idx, p2, now=0.6)  # queued for p0's slot, the first to free
    assert idx.in_host_memory(p0[0])
    blocks, ready, leader, _ = idx.match(p0, now=0.7)
    assert blocks == len(p0) and (ready, leader) == (1.0, end0)
    end0.set()
    assert idx.match(p0, now=1.1)[2] is None  # in host memory now, free for the next request


def test_a_host_memory_cache_once_seen_is_not_unlearned_by_one_prompt_it_dropped():
    # Known to keep prompts that leave a slot, a server that reports one cold dropped it by its cache's own
    # bound; and a prompt that was in a slot when routed (not believed in host memory) found cold says
    # nothing of host memory at all.
    idx = BackendPrefixes(host_memory=True)
    p0, p1 = (blocks_of(chat(("system", f"Policy {k}. " + SYSTEM), ("user", "q"))).keys for k in range(2))
    idx.verify(predicted_blocks=len(p1), turnover=None, reported_share=0.0, share_per_block=0.05, first=p1[0],
               hosted=True)
    assert idx.host_memory is True
    fresh = BackendPrefixes()
    _computed(fresh, p0, now=0.0).set()
    fresh.verify(predicted_blocks=len(p0), turnover=None, reported_share=0.0, share_per_block=0.05, first=p0[0])
    assert fresh.host_memory is None


def test_a_miss_on_a_cache_lost_to_a_slot_teaches_no_capacity():
    # No turnover (a slot-scoped cache: a prompt is lost to a slot taken, not to tokens sent since): the
    # accuracy learns from the miss, the capacity does not.
    idx = BackendPrefixes(capacity_tokens=32768)
    idx.verify(predicted_blocks=10, turnover=None, reported_share=0.0, share_per_block=0.1)
    assert idx.capacity_tokens == 32768 and idx.accuracy < 0.8


def test_a_backend_whose_cache_is_shared_by_every_request_never_has_a_busy_copy():
    idx = BackendPrefixes()
    keys = blocks_of(chat(("system", SYSTEM), ("user", "first"))).keys
    idx.record(keys, now=0, ready_at=0.0)  # nothing occupies it (vLLM's block cache: no occupy)
    assert idx.match(keys, now=1)[2] is None


def test_the_prompts_believed_in_slots_leave_with_their_entries():
    # Where no slot taken forgets a prompt (the slots not published, or the server keeps what leaves a slot),
    # the index's capacity and TTL alone bound it: a prompt they drop leaves no mark of a copy behind, so
    # a stream of unique prompts holds the memory of the few still indexed, not of every one ever sent.
    unbound = BackendPrefixes(ttl_s=120, host_memory=True)
    for idx, slots in ((BackendPrefixes(ttl_s=120), 0), (unbound, 2)):
        for k in range(50):
            keys = blocks_of(chat(("system", f"Policy {k}. " + SYSTEM), ("user", "q"))).keys
            _computed(idx, keys, now=200.0 * k, slots=slots).set()
        assert len(idx._held) == 1  # the last prompt's: every earlier one expired


def test_the_prompt_named_as_pushed_out_is_the_one_a_taken_slot_forgets():
    # latency_aware charges a placement for the prompt it pushes out (pushed_out); the index then
    # forgets one when the copy takes a slot (occupy). Both must name the same prompt, also where two
    # were last used at the same instant (a closed-loop burst's clients start together) and where every
    # slot runs and two are predicted to free at once.
    p = [blocks_of(chat(("system", f"Policy {k}. " + SYSTEM), ("user", "q"))).keys for k in range(6)]
    for busy in (False, True):
        for a, b in ((0, 1), (1, 0), (3, 4), (4, 3)):
            idx = BackendPrefixes(host_memory=False)
            for k in (a, b):
                end = _computed(idx, p[k], now=0.0)
                if not busy:
                    end.set()
            named = idx.pushed_out(p[5][0])
            _computed(idx, p[5], now=1.0)
            forgotten = [k for k in (a, b) if idx.match(p[k], now=1.5)[0] == 0]
            assert forgotten and named == p[forgotten[0]][0], (busy, a, b)


def test_the_prompts_believed_in_slots_are_exactly_the_entries_holding_copies():
    # _free_slot, pushed_out and copies_besides read one list of the prompts in slots (_in_slots) and
    # prune nothing: every path that drops an entry, or its last copy, drops it from `_held` too. Played
    # over seeded mixes of placements, releases, prefills lost, capacity evictions and expiries.
    prompts = [blocks_of(chat(("system", f"Policy {k}. " + SYSTEM), ("user", "q"))).keys for k in range(8)]
    for seed in range(20):
        rng = random.Random(seed)
        idx = BackendPrefixes(capacity_tokens=rng.choice((600, 2000, 32768)), ttl_s=rng.choice((5.0, 120.0)))
        idx.host_memory = rng.choice((None, False, True))
        slots = rng.choice((0, 1, 2, 3))
        running: list[asyncio.Event] = []
        now = 0.0
        for _ in range(300):
            now += rng.expovariate(1.0)
            keys = rng.choice(prompts)
            step = rng.random()
            if step < 0.6:
                end = asyncio.Event()
                idx.record(keys, now=now, ready_at=now + 0.5, leader=end)
                idx.occupy(keys, release_at=now + rng.uniform(0.5, 3.0), event=end, computes=rng.random() < 0.8,
                           slots=slots)
                running.append(end)
            elif step < 0.7:
                idx.settle(keys, now=now, lost=True)
            elif running:
                running.pop(rng.randrange(len(running))).set()
            assert set(idx._held) == {k for k, e in idx._blocks.items() if e.copies}, (seed, now)
            # A prompt in host memory only is an entry with no copy in a slot, and never on a server known
            # to lose such prompts.
            assert all(k in idx._blocks and not idx._blocks[k].copies for k in idx._hosted), (seed, now)
            assert not (idx._hosted and idx.host_memory is False), (seed, now)
            assert idx.copies_besides(None) == sum(e.copies for e in idx._blocks.values())
