"""Gateway replicas tell each other which backend computed which prompt prefix (Redis pub/sub).

Each replica's prefix index learns from its own placements only. Behind three replicas on two real
llama.cpp servers (six shared system prompts, six clients; issue 24, bench/prefix_routing.py --replicas 3)
a replica sent a prompt it had never placed to the server its own load favoured, though the others had it
warm on its home; from then on that replica kept it there, and 3-6 of the 6 prompts ran on both servers
(one gateway: 0-3). A replica that hears every placement prices the home warm, as one gateway would.

What travels is what the index keys on: the backend's name, a fingerprint of its URL and model (a replica
applies only placements on a backend it knows by both, so a config that names another server alike is not
misled), and the prompt's block keys (blake2b digests of the text: no prompt text). A placement is
published once its prefill is done (the first token, or the end of a call that reports none), never for a
request that ended before computing it, so a replica hears only of prefixes a backend really holds.

Off the request path: a placement is queued (a dict insertion) and a background task publishes the queue
in one message; another task applies what the other replicas published. Redis down costs the sharing,
nothing else: messages are dropped (counted), and the listener reconnects.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from redis.exceptions import RedisError

log = logging.getLogger("slipstream.routing.placements")

# Placements queued while a publish is under way; beyond this many (Redis slow or gone) new ones are dropped.
PENDING_MAX = 512
# After a failed publish or a lost subscription, wait this long before the next try.
RETRY_S = 1.0
_OUTAGE = (RedisError, OSError, TimeoutError)


def fingerprint(base_url: str, model: str) -> str:
    """What a backend is across replicas: its URL and model, hashed (the URL may carry a credential)."""
    return hashlib.blake2b(f"{base_url}\0{model}".encode(), digest_size=6).hexdigest()


class PlacementFeed:
    """One replica's end of the feed: `computed` queues this replica's placements; `publish_forever` sends
    them; `listen_forever` hands the others' to `apply` (backend name, block keys)."""

    def __init__(self, publisher: Any, subscriber: Any, channel: str, backends: Mapping[str, str],
                 publish_timeout_s: float) -> None:
        """`publisher` and `subscriber`: redis.asyncio clients (the subscriber's without a read timeout: a
        quiet channel is not a failure). `backends`: each backend's name and fingerprint."""
        self._pub, self._sub, self._channel = publisher, subscriber, channel
        self._fingerprints = dict(backends)
        self._timeout_s = publish_timeout_s
        self._origin = os.urandom(8).hex()  # this replica: its own messages come back to it, and are skipped
        # (backend, last block key) -> the placement: a prompt placed twice before a publish goes once.
        self._pending: dict[tuple[str, bytes], tuple[str, list[bytes]]] = {}
        self._wake = asyncio.Event()
        self.published = 0  # placements sent
        self.dropped = 0  # placements not sent: the queue was full, or Redis failed
        self.received = 0  # placements heard from other replicas and applied
        self.ignored = 0  # heard but not applied: a backend this replica does not know by that name and server
        self.errors = 0  # failed publishes, lost subscriptions, unreadable messages

    def computed(self, backend: str, keys: list[bytes]) -> None:
        """This replica's request computed `keys` on `backend` (its first token came): tell the others."""
        if not keys:
            return
        k = (backend, keys[-1])
        if k not in self._pending and len(self._pending) >= PENDING_MAX:
            self.dropped += 1
            return
        self._pending[k] = (backend, keys)
        self._wake.set()

    def encode(self, placements: list[tuple[str, list[bytes]]]) -> bytes:
        return orjson.dumps({"from": self._origin, "placed": [
            [name, self._fingerprints.get(name, ""), [key.hex() for key in keys]] for name, keys in placements]})

    def decode(self, data: bytes) -> list[tuple[str, list[bytes]]] | None:
        """The placements in another replica's message that name a backend this replica knows alike; None
        for this replica's own message. ValueError (or KeyError, TypeError) for a malformed one."""
        msg = orjson.loads(data)
        if msg["from"] == self._origin:
            return None
        out = []
        for name, fp, keys in msg["placed"]:
            if not isinstance(name, str) or self._fingerprints.get(name) != fp:
                self.ignored += 1
                continue
            out.append((name, [bytes.fromhex(k) for k in keys]))
        return out

    async def publish_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = list(self._pending.values()), {}
            try:
                await asyncio.wait_for(self._pub.publish(self._channel, self.encode(batch)), self._timeout_s)
                self.published += len(batch)
            except asyncio.CancelledError:
                raise
            except _OUTAGE as exc:  # Redis slow or gone: sharing pauses, routing goes on alone
                self.dropped += len(batch)
                self.errors += 1
                log.warning("placement feed: publish failed (%s); %d placement(s) dropped", type(exc).__name__, len(batch))
                await asyncio.sleep(RETRY_S)

    async def listen_forever(self, apply: Callable[[str, list[bytes]], object]) -> None:
        while True:
            pubsub = self._sub.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel)
                async for message in pubsub.listen():
                    if message.get("type") != "message":
                        continue
                    try:
                        placements = self.decode(message["data"])
                    except (ValueError, KeyError, TypeError):
                        self.errors += 1
                        log.warning("placement feed: an unreadable message on %s, skipped", self._channel)
                        continue
                    for name, keys in placements or ():
                        apply(name, keys)
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
