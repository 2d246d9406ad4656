"""Gateway replicas tell each other where their requests' prompt prefixes go (Redis pub/sub).

Each replica's prefix index learns from its own placements only. Behind three replicas on two real
llama.cpp servers (six shared system prompts, six clients; issue 24, bench/prefix_routing.py --replicas 3)
a replica sent a prompt it had never placed to the server its own load favoured, though the others had it
warm on its home; from then on that replica kept it there, and 3-6 of the 6 prompts ran on both servers
(one gateway: 0-3). Told only that a prefix was computed, replicas stopped splitting prompts, but their
siblings went cold beside it as often: on llama.cpp a prompt's cache is its slot's, busy until the request
using it ends, and a sibling sent meanwhile is prefilled again in another slot. So a replica tells what
its own lease knows: a request placed (its backend, its prompt's block keys, when its first token and its
end are predicted), its first token (the copy is computed), and its end (the copy is free, or was never
computed). The other replicas hold the copy in their indexes as their own leases would
(app/routing/remote_copies.py): a sibling there waits for it or goes elsewhere, priced as at one gateway.

What travels is what the index keys on: the backend's name with a fingerprint of its URL and model (a
replica applies only events on a backend it knows by both, so a config that names another server alike
is not misled), and the block keys (blake2b digests of the text: no prompt text). Off the request path:
an event is queued (a list append) and a background task publishes the queue in one message; another
task hands the other replicas' events on. Redis down costs the sharing, nothing else: events are dropped
(counted) and the listener reconnects; a copy whose end is never heard expires on the listener's side.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson
from redis.exceptions import RedisError

log = logging.getLogger("slipstream.routing.placements")

# Events queued while a publish is under way; beyond this many (Redis slow or gone) new ones are dropped.
PENDING_MAX = 1024
# After a failed publish or a lost subscription, wait this long before the next try.
RETRY_S = 1.0
_OUTAGE = (RedisError, OSError, TimeoutError)

Lost = Literal["backend", "ended"] | None


def fingerprint(base_url: str, model: str) -> str:
    """What a backend is across replicas: its URL and model, hashed (the URL may carry a credential)."""
    return hashlib.blake2b(f"{base_url}\0{model}".encode(), digest_size=6).hexdigest()


@dataclass(frozen=True, slots=True)
class Placed:
    """Another replica placed a request: `copy` (its id there) on `backend`, its prompt's block `keys`; its
    first token predicted `ready_in_s` from now, its end `release_in_s`; `computes`: it computes its own
    copy of the prefix (it does not wait for a busy one)."""

    origin: str
    copy: int
    backend: str
    keys: list[bytes]
    ready_in_s: float
    release_in_s: float
    computes: bool


@dataclass(frozen=True, slots=True)
class Computed:
    """That request's first token came: its copy of the prefix is computed."""

    origin: str
    copy: int


@dataclass(frozen=True, slots=True)
class Freed:
    """That request ended: its copy is free, or (`lost`) was never computed."""

    origin: str
    copy: int
    lost: Lost


Event = Placed | Computed | Freed


class Listener(Protocol):
    def __call__(self, event: Event) -> None: ...


class PlacementFeed:
    """One replica's end of the feed: `placed`, `computed` and `freed` queue this replica's events,
    `publish_forever` sends them, `listen_forever` hands the others' to a listener."""

    def __init__(self, publisher: Any, subscriber: Any, channel: str, backends: dict[str, str],
                 publish_timeout_s: float) -> None:
        """`publisher` and `subscriber`: redis.asyncio clients (the subscriber's without a read timeout: a
        quiet channel is not a failure). `backends`: each backend's name and fingerprint."""
        self._pub, self._sub, self._channel = publisher, subscriber, channel
        self._fingerprints = dict(backends)
        self._timeout_s = publish_timeout_s
        self._origin = os.urandom(8).hex()  # this replica: its own messages come back to it, and are skipped
        self._pending: list[list] = []
        self._wake = asyncio.Event()
        self._next_copy = 0
        self.published = 0  # events sent
        self.dropped = 0  # events not sent: the queue was full, or Redis failed
        self.received = 0  # events heard from other replicas and handed on
        self.ignored = 0  # heard but not handed on: a backend this replica does not know by that name and server
        self.errors = 0  # failed publishes, lost subscriptions, unreadable messages

    def _queue(self, event: list) -> None:
        if len(self._pending) >= PENDING_MAX:
            self.dropped += 1
            return
        self._pending.append(event)
        self._wake.set()

    def placed(self, backend: str, keys: list[bytes], ready_in_s: float, release_in_s: float, computes: bool) -> int:
        """This replica placed a request whose prompt starts with `keys` on `backend`: its copy's id, for
        `computed` and `freed`."""
        self._next_copy += 1
        # The keys are hex-encoded by the publisher (drain), off the request's path: the list is the prompt's,
        # never changed after it was hashed.
        self._queue(["p", self._next_copy, backend, self._fingerprints.get(backend, ""), keys,
                     round(ready_in_s, 4), round(release_in_s, 4), computes])
        return self._next_copy

    def computed(self, copy: int) -> None:
        self._queue(["c", copy])

    def freed(self, copy: int, lost: Lost) -> None:
        self._queue(["f", copy, lost])

    def drain(self) -> tuple[bytes, int] | None:
        """The queued events as one message, and how many (None: none queued); the queue is then empty."""
        if not self._pending:
            return None
        batch, self._pending = self._pending, []
        for e in batch:
            if e[0] == "p":
                e[4] = [k.hex() for k in e[4]]
        return orjson.dumps({"from": self._origin, "events": batch}), len(batch)

    def decode(self, data: bytes) -> list[Event]:
        """The events in another replica's message on backends this replica knows alike (none for its own
        message). ValueError (or KeyError, TypeError, IndexError) for a malformed one."""
        msg = orjson.loads(data)
        origin = msg["from"]
        if origin == self._origin:
            return []
        out: list[Event] = []
        for e in msg["events"]:
            kind, copy = e[0], int(e[1])
            if kind == "p":
                name, fp, keys, ready, release, computes = e[2:8]
                if not isinstance(name, str) or self._fingerprints.get(name) != fp:
                    self.ignored += 1
                    continue
                out.append(Placed(origin, copy, name, [bytes.fromhex(k) for k in keys], max(0.0, float(ready)),
                                  max(0.0, float(release)), bool(computes)))
            elif kind == "c":
                out.append(Computed(origin, copy))
            elif kind == "f":
                out.append(Freed(origin, copy, e[2] if e[2] in ("backend", "ended") else None))
            else:
                raise ValueError(f"unknown event kind {kind!r}")
        return out

    async def publish_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            drained = self.drain()
            if drained is None:
                continue
            message, n = drained
            try:
                await asyncio.wait_for(self._pub.publish(self._channel, message), self._timeout_s)
                self.published += n
            except asyncio.CancelledError:
                raise
            except _OUTAGE as exc:  # Redis slow or gone: sharing pauses, routing goes on alone
                self.dropped += n
                self.errors += 1
                log.warning("placement feed: publish failed (%s); %d event(s) dropped", type(exc).__name__, n)
                await asyncio.sleep(RETRY_S)

    async def listen_forever(self, listener: Listener) -> None:
        while True:
            pubsub = self._sub.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel)
                async for message in pubsub.listen():
                    if message.get("type") != "message":
                        continue
                    try:
                        events = self.decode(message["data"])
                    except (ValueError, KeyError, TypeError, IndexError):
                        self.errors += 1
                        log.warning("placement feed: an unreadable message on %s, skipped", self._channel)
                        continue
                    for event in events:
                        listener(event)
                        self.received += 1
            except asyncio.CancelledError:
                raise
            except _OUTAGE as exc:
                self.errors += 1
                log.warning("placement feed: subscription lost (%s); retrying", type(exc).__name__)
            finally:
                try:
                    await pubsub.aclose()
                except Exception:  # closing a broken connection may fail too; nothing is left to release
                    log.debug("placement feed: closing the subscription failed", exc_info=True)
            await asyncio.sleep(RETRY_S)

    def snapshot(self) -> dict:
        return {"channel": self._channel, "published": self.published, "dropped": self.dropped,
                "received": self.received, "ignored": self.ignored, "errors": self.errors,
                "pending": len(self._pending)}

    async def aclose(self) -> None:
        for client in (self._pub, self._sub):
            try:
                await client.aclose()
            except Exception:  # already broken: nothing to release
                log.debug("placement feed: closing a Redis client failed", exc_info=True)
