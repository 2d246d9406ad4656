"""The cache stage: decide per request what may be looked up and stored, look up, store.

Fails open: a store that errors or answers slower than `cache.timeout_ms`, an embedding later than
its wait (`Embedder.wait_s`) or the request's deadline, or a verifier without a verdict makes the request a miss,
counts it, and logs at most one line per interval. No request fails because of the cache. Writes go
through a background writer (app/cache/writer.py) and never hold up a response.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from app.cache import guard, history, normalise, wordnet
from app.cache.category import Category, classify_turns
from app.cache.context import ContextAligner
from app.cache.embedder import WINDOW_CHARS, Embedder, beyond_window
from app.cache.entry import CachedAnswer, Hit
from app.cache.judge import AskFn, LlmJudge
from app.cache.keys import SemanticQuery, exact_key, is_deterministic, parse_stored, semantic_query
from app.cache.store import CacheStore
from app.cache.verify import confirm
from app.cache.writer import StoreWriter, WriteOp, WriterStats
from app.config import CacheConfig, CachePolicy, SemanticCachePolicy
from app.errors import InvalidRequest
from app.protocols import CHAT, ClientProtocol, ParsedRequest

log = logging.getLogger("slipstream.cache")

TTL_HEADER = "x-slipstream-cache-ttl"
THRESHOLD_HEADER = "x-slipstream-cache-threshold"
CATEGORY_HEADER = "x-slipstream-cache-category"
_LOG_EVERY_S = 10.0
_NEIGHBOURS = 4
_TURN_VECTORS_MAX = 4096


@dataclass(slots=True)
class CachePlan:
    """What the cache may do for one request, and what it found."""

    policy: CachePolicy
    status: str = "bypass"  # the x-slipstream-cache header: hit | semantic-hit | stale | miss | bypass
    exact_key: str | None = None
    semantic: SemanticQuery | None = None
    lookup: bool = False
    store: bool = False
    ttl_s: float | None = None  # the client's x-slipstream-cache-ttl, capped
    threshold: float = 1.0
    threshold_asked: bool = False  # the client set it (x-slipstream-cache-threshold): no category changes it
    # The question's category (app/cache/category.py): its TTL and threshold apply; None when bypassed.
    category: Category | None = None
    vector: np.ndarray | None = None
    stale: CachedAnswer | None = None
    similarity: float | None = None
    embed_s: float = 0.0
    verifier: str | None = None  # which verifier confirmed a semantic hit ("guard", "context", "statement", "judge", "similarity")
    protocol: ClientProtocol = CHAT  # the client API whose answers this plan stores


@dataclass(slots=True)
class CacheStats:
    hits: int = 0
    semantic_hits: int = 0
    misses: int = 0
    bypassed: int = 0
    stores: int = 0
    stale_served: int = 0
    guard_rejections: int = 0
    judge_rejections: int = 0  # the judge answered no
    judge_failures: int = 0  # the judge gave no verdict: it failed, timed out or answered neither yes nor no
    history_rejections: int = 0
    # Candidates refused by their category's rules: older than the asked question's category allows, or
    # below the stored question's category threshold.
    category_rejections: int = 0
    beyond_window: int = 0  # semantic lookups skipped: the last turn is longer than the model reads
    embed_timeouts: int = 0
    errors: int = 0


@dataclass
class Cache:
    config: CacheConfig
    store: CacheStore
    embedder: Embedder | None
    stats: CacheStats = field(default_factory=CacheStats)
    # ask(alias, body, timeout_s): how an LLM judge reaches a model alias (the composition root passes
    # app.dispatch.ask in); None: no judge can be asked, and a configured one fails closed.
    ask: AskFn | None = None
    _last_log: float = 0.0
    _down_until: float = 0.0
    _failures_in_a_row: int = 0
    _pending: set = field(default_factory=set)
    _judges: dict = field(default_factory=dict)
    _aligner: ContextAligner | None = None
    _writer: StoreWriter | None = None
    # Vectors of earlier turns that differed from a candidate's, so a conversation's history is
    # embedded once, not once per follow-up.
    _turn_vectors: OrderedDict = field(default_factory=OrderedDict)

    @property
    def _context(self) -> ContextAligner | None:
        if self._aligner is None and self.embedder is not None:
            self._aligner = ContextAligner(self.embedder)
        return self._aligner

    @property
    def writer_stats(self):
        return self._writer.stats if self._writer is not None else WriterStats()

    @property
    def writer(self) -> StoreWriter:
        if self._writer is None:
            self._writer = StoreWriter(self.store, self.config.write_timeout_ms / 1000, self.config.write_queue_max,
                                       on_result=self._note_store_result)
        return self._writer

    def plan(self, tenant: str, req: ParsedRequest, policy: CachePolicy, headers: dict[str, str]) -> CachePlan:
        """Decide eligibility from the policy, the request and its Cache-Control headers."""
        plan = CachePlan(policy, protocol=req.protocol)
        if not req.protocol.streams:  # embeddings: not cached
            return plan
        # The client's cache headers are checked whether or not this request is cached: a bad value is a 400
        # on every request that sends it, not only on those the cache would keep.
        ttl_s = _ttl(headers.get(TTL_HEADER))
        asked = headers.get(THRESHOLD_HEADER)
        threshold = _threshold(asked, policy.semantic.threshold)
        exact_ok = policy.exact.enabled and (not policy.exact.deterministic_only or is_deterministic(req.body))
        if exact_ok:
            plan.exact_key = exact_key(tenant, req)
        if policy.semantic.enabled and self.embedder is not None:
            plan.semantic = semantic_query(tenant, req)
            plan.threshold, plan.threshold_asked = threshold, asked is not None
        if plan.exact_key is None and plan.semantic is None:
            return plan
        plan.ttl_s = ttl_s
        if plan.ttl_s is not None:
            plan.ttl_s = min(plan.ttl_s, policy.max_client_ttl_s)  # a client may shorten, not pin, an entry
        plan.category = _category(req, plan.semantic)
        rules = policy.categories.of(plan.category)
        if rules.ttl_s == 0:  # this category is never cached: nothing looked up, nothing stored
            plan.exact_key, plan.semantic, plan.category = None, None, None
            return plan
        if rules.threshold is not None and not plan.threshold_asked:
            plan.threshold = rules.threshold
        control = headers.get("cache-control")
        directives = {d.strip().lower() for d in control.split(",")} if control else set()
        plan.lookup = "no-cache" not in directives
        plan.store = "no-store" not in directives
        if plan.lookup or plan.store:
            plan.status = "miss"
        else:
            plan.category = None  # a bypass follows no category's rules
        return plan

    async def lookup(self, plan: CachePlan, deadline=None) -> Hit | None:
        """Exact first, then semantic; None on a miss (or when the store is unwell).

        `deadline` (anything with `remaining()` seconds) bounds the embedding and the verifiers: what
        is not done in time is a miss, so a tight deadline never waits on the cache.
        """
        return await self.lookup_exact(plan) or await self.lookup_semantic(plan, deadline)

    async def lookup_exact(self, plan: CachePlan) -> Hit | None:
        """The exact entry, if fresh: one store read, no model. A miss here is counted by lookup_semantic."""
        if not plan.lookup or plan.exact_key is None:
            return None
        raw = await self._safe(self.store.get(plan.exact_key))
        answer = CachedAnswer.from_bytes(raw) if raw else None
        if answer is not None and answer.fresh and not _too_old(plan, answer):
            self.stats.hits += 1
            plan.status = "hit"
            return Hit(answer, "hit")
        plan.stale = answer
        return None

    async def lookup_semantic(self, plan: CachePlan, deadline=None) -> Hit | None:
        """The semantic lookup after an exact miss (see `lookup`); counts the miss."""
        if not plan.lookup:
            self.stats.bypassed += 1
            return None
        if plan.semantic is not None:
            hit = await self._semantic_lookup(plan, deadline)
            if hit is not None:
                return hit
        self.stats.misses += 1
        return None

    async def _semantic_lookup(self, plan: CachePlan, deadline) -> Hit | None:
        q, embedder = plan.semantic, self.embedder
        assert q is not None and embedder is not None  # planned only when the alias's semantic cache is on
        policy = plan.policy.semantic
        t0 = time.perf_counter()
        left = (lambda: deadline.remaining()) if deadline is not None else (lambda: float("inf"))
        plan.vector = await embedder.embed(q.text, min(embedder.wait_s(), left()))
        plan.embed_s = time.perf_counter() - t0
        if plan.vector is None:
            self.stats.embed_timeouts += 1
            return None  # the embedding was late or failed: a miss, never an error
        if beyond_window(plan.vector):
            # Longer than the model reads: two such texts sharing their opening would look identical,
            # so this question is looked up and stored exactly only.
            self.stats.beyond_window += 1
            plan.semantic, plan.vector = None, None
            return None
        neighbours = await self._safe(self.store.nearest(q.scope, plan.vector, _NEIGHBOURS)) or []
        judge = self._judge(policy)
        judge_from = policy.judge.min_similarity if policy.judge is not None else 1.0
        context = self._context if policy.context else None
        for n in neighbours:
            if n.similarity < plan.threshold:
                break
            answer = CachedAnswer.from_bytes(n.answer)
            if answer is None:
                continue
            if not _category_admits(plan, answer, n.similarity):
                self.stats.category_rejections += 1
                continue
            cached, earlier = parse_stored(n.query)
            ok, by = await confirm(q.text, cached, n.similarity, policy.guard, judge, judge_from, left, context)
            if not ok and by in ("guard:words", "guard:order") and history.same_statement(cached, q.text):
                ok, by = True, "statement"  # a first-person statement with the same facts (app/cache/history.py)
            if not ok:
                if by.startswith("guard:"):
                    self.stats.guard_rejections += 1
                elif by == "judge:no":
                    self.stats.judge_rejections += 1
                else:  # the judge gave no verdict: a miss, but not a refusal
                    self.stats.judge_failures += 1
                continue
            if not await self._same_history(q, earlier, plan.threshold, policy.guard, left, context):
                self.stats.history_rejections += 1
                continue
            self.stats.semantic_hits += 1
            plan.status, plan.similarity, plan.verifier = "semantic-hit", n.similarity, by
            return Hit(answer, "semantic-hit", n.similarity, by)
        return None

    async def _same_history(self, q: SemanticQuery, cached: tuple[str, ...], threshold: float, use_guard: bool,
                            left, context: ContextAligner | None = None) -> bool:
        """Earlier turns match pairwise (app/cache/history.py): the same text, or words that pass the
        turn's rules (a statement keeps its facts; a question is compared as the last turn is) and
        similarity at the threshold. The scope already made the roles and their order, the system
        prompts and the parameters equal."""
        asked = q.history
        if len(asked) != len(cached):
            return False
        roles = q.roles if len(q.roles) == len(asked) else ("user", "assistant") * len(asked)
        differ = [(r, a, c) for r, a, c in zip(roles, asked, cached) if a != c]
        if not differ:
            return True
        if any(len(t) > WINDOW_CHARS for _, a, c in differ for t in (a, c)):
            return False  # beyond the model's window: such turns must be equal (and the guard never reads a huge text)
        # Microseconds: the word rules of every pair before any embedding.
        needs = [history.check(r, c, a, use_guard) for r, a, c in differ]
        if any(n is history.Need.NO for n in needs):
            return False
        for need, (_, a, c) in zip(needs, differ):
            if need is history.Need.CONTEXT and (context is None or not (await context.verify(a, c, left())).ok):
                return False
        vectors = await self._vectors([t for _, a, c in differ for t in (a, c)], left)
        if vectors is None:
            return False  # late: a miss
        for i in range(len(differ)):
            va, vc = vectors[2 * i], vectors[2 * i + 1]
            if beyond_window(va) or beyond_window(vc) or float(va @ vc) < threshold:
                return False
        return True

    async def _vectors(self, texts: list[str], left) -> list[np.ndarray] | None:
        memo = self._turn_vectors
        todo = list(dict.fromkeys(t for t in texts if t not in memo))
        if todo:
            embedder = self.embedder
            assert embedder is not None  # only a semantic lookup compares turns
            timeout = min(embedder.wait_s(len(todo)), left())
            got = await asyncio.gather(*(embedder.embed(t, timeout) for t in todo))
            if any(v is None for v in got):
                self.stats.embed_timeouts += 1
                return None
            for t, v in zip(todo, got):
                memo[t] = v
                while len(memo) > _TURN_VECTORS_MAX:
                    memo.popitem(last=False)
        for t in texts:
            memo.move_to_end(t)
        return [memo[t] for t in texts]

    def _judge(self, policy: SemanticCachePolicy) -> LlmJudge | None:
        if policy.judge is None:
            return None
        judge = self._judges.get(policy.judge)
        if judge is None:
            judge = self._judges[policy.judge] = LlmJudge(policy.judge, self.ask or _no_model)
        return judge

    def serve_stale(self, plan: CachePlan) -> Hit | None:
        """The expired exact entry found at lookup, if the policy lets it stand in for a failed call."""
        answer = plan.stale
        if answer is None or plan.policy.stale_s <= 0 or time.time() > answer.fresh_until + plan.policy.stale_s:
            return None
        self.stats.stale_served += 1
        plan.status = "stale"
        return Hit(answer, "stale")

    def save_later(self, plan: CachePlan, body: dict) -> None:
        """Store a complete answer in the background, if the policy accepts how it ended."""
        if not plan.store:
            return
        task = asyncio.get_running_loop().create_task(self._save(plan, body))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _save(self, plan: CachePlan, body: dict) -> None:
        reasons = plan.protocol.cache_finish_reasons(body)
        if not reasons or not all(r in plan.policy.finish_reasons for r in reasons):
            return  # errors, truncated answers and excluded finish reasons are never cached
        now = time.time()
        category = plan.category or Category.GENERAL
        rules = plan.policy.categories.of(category)
        if plan.exact_key is not None:
            ttl = _entry_ttl(plan.ttl_s, rules.ttl_s, plan.policy.exact.ttl_s)
            entry = CachedAnswer(body, now, now + ttl, category).to_bytes()
            self.writer.submit(WriteOp(entry, ttl + plan.policy.stale_s, key=plan.exact_key))
        if plan.semantic is not None and self.embedder is not None:
            ttl = _entry_ttl(plan.ttl_s, rules.ttl_s, plan.policy.semantic.ttl_s)
            # The lookup's vector, or (when that embedding was late) one made now, off the request's path.
            vector = plan.vector if plan.vector is not None else await self.embedder.embed(plan.semantic.text, 10.0)
            if vector is not None and not beyond_window(vector):
                entry = CachedAnswer(body, now, now + ttl, category).to_bytes()
                self.writer.submit(WriteOp(entry, ttl, scope=plan.semantic.scope, vector=vector, query=plan.semantic.stored()))
        self.stats.stores += 1

    async def _safe(self, coro):
        if time.monotonic() < self._down_until:
            coro.close()  # the store failed repeatedly a moment ago: do not make every request wait
            self.stats.errors += 1
            return None
        try:
            async with asyncio.timeout(self.config.timeout_ms / 1000):
                result = await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a store failure is a miss, counted; never the request's error
            self._note_store_result(False, exc)
            return None
        self._note_store_result(True, None)
        return result

    def _note_store_result(self, ok: bool, exc: Exception | None) -> None:
        """Skip the store for a while only after `skip_after_failures` outages in a row, not after one."""
        if ok:
            self._failures_in_a_row = 0
            return
        self.stats.errors += 1
        now = time.monotonic()
        if isinstance(exc, self.store.OUTAGE_ERRORS):
            self._failures_in_a_row += 1
            if self._failures_in_a_row >= self.config.skip_after_failures:
                self._down_until = now + self.config.skip_for_s
                self._failures_in_a_row = 0
        if now - self._last_log >= _LOG_EVERY_S:
            self._last_log = now
            log.warning("cache store unavailable, serving without it (%s: %.200s); %d errors so far",
                        type(exc).__name__, exc, self.stats.errors)

    async def flush(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) until every answer handed to `save_later` so far is written to the store or
        given up: a test's next lookup sees it without sleeping, and a drain before shutdown keeps it."""
        async with asyncio.timeout(timeout_s):
            while self._pending:
                await asyncio.gather(*list(self._pending), return_exceptions=True)
        if self._writer is not None:
            await self._writer.drain(timeout_s)

    async def start(self) -> None:
        if self.embedder is not None:
            await self.embedder.start()
            await asyncio.to_thread(normalise.warm)  # the spelling dictionary, read before the first request
            await asyncio.to_thread(wordnet.lexicon)  # WordNet (the guard's synonyms and opposites), likewise
            await asyncio.to_thread(guard.english_rank)  # the guard's word frequencies, from the same dictionary

    async def aclose(self) -> None:
        await asyncio.gather(*self._pending, return_exceptions=True)
        if self._writer is not None:
            await self._writer.aclose()
        if self.embedder is not None:
            await self.embedder.aclose()
        await self.store.aclose()


def _category(req: ParsedRequest, q: SemanticQuery | None) -> Category:
    """The request's category: of its last user turn as the semantic cache compares it (normalised:
    "rn" reads "right now"), else as sent; a general last turn takes the earlier user turns' (a
    follow-up "And in London?" asks what its conversation asked). Without a semantic query (the semantic
    cache off, or media and tool turns, which only the exact cache holds: an answer about a photo "right
    now" ages as fast as any) the text parts of the user turns are read as sent."""
    if q is not None:
        return classify_turns(q.text, tuple(t for r, t in zip(q.roles, q.history) if r == "user"))
    texts = req.protocol.user_texts(req.body)
    return classify_turns(texts[-1], tuple(texts[:-1])) if texts else Category.GENERAL


def _entry_ttl(client_s: float | None, category_s: float | None, store_s: float) -> float:
    """An entry's TTL: the client's, else its category's, else the store's; a category's TTL is also
    the longest a client may ask for (a price is not made fresh for a day by asking)."""
    ttl = client_s or (category_s if category_s is not None else store_s)
    return ttl if category_s is None else min(ttl, category_s)


def _category_admits(plan: CachePlan, answer: CachedAnswer, similarity: float) -> bool:
    """A candidate's category rules: the asked question's category bounds the entry's age (a volatile
    question never gets a general entry's answer older than the volatile TTL), and the stored
    question's category threshold applies as well as the asked one's (the stricter wins) unless the
    client set the threshold."""
    if _too_old(plan, answer):
        return False
    if plan.threshold_asked:
        return True
    stored = plan.policy.categories.of(answer.category).threshold
    return similarity >= (stored if stored is not None else plan.policy.semantic.threshold)


def _too_old(plan: CachePlan, answer: CachedAnswer) -> bool:
    """Older than the asked question's category allows, whatever the entry's own TTL: an exact entry
    stored before categories existed (general, the store's hour, still in Redis after an upgrade) or
    before a reload shortened the category's TTL is not served fresh to a volatile question."""
    max_age = plan.policy.categories.of(plan.category or Category.GENERAL).ttl_s
    return max_age is not None and time.time() - answer.created >= max_age


def _ttl(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        ttl = float(value)
    except ValueError:
        ttl = -1
    if not 0 < ttl < 10**8:
        raise InvalidRequest(f"{TTL_HEADER} must be a positive number of seconds", param=TTL_HEADER)
    return ttl


def _threshold(value: str | None, default: float) -> float:
    if value is None:
        return default
    try:
        t = float(value)
    except ValueError:
        t = -1
    if not 0 < t <= 1:
        raise InvalidRequest(f"{THRESHOLD_HEADER} must be a number in (0, 1]", param=THRESHOLD_HEADER)
    return t


async def _no_model(alias: str, body: dict, timeout_s: float) -> dict | None:
    return None  # no way to reach a model: the judge fails closed


def build_cache(config: CacheConfig, semantic_wanted: bool, ask: AskFn | None = None) -> Cache:
    """The configured store, and the embedding model only when some alias uses the semantic cache."""
    store: CacheStore
    if config.store == "redis":
        assert config.redis_url is not None  # the config's validator requires it for this store
        from app.cache.embedder import model_id
        from app.cache.redis_store import RedisStore, connect

        client = connect(config.redis_url, config.timeout_ms / 1000)
        writes = connect(config.redis_url, config.write_timeout_ms / 1000)
        store = RedisStore(client, config.key_prefix, model_id(config.embedding.quantization), write_client=writes,
                           vector_type=config.redis_vector_type.upper())
    else:
        from app.cache.store import MemoryStore

        store = MemoryStore(config.memory_max_entries)
    return Cache(config, store, Embedder(config.embedding) if semantic_wanted else None, ask=ask)
