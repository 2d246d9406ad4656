"""Stored responses across two gateway replicas on one real Redis: a chain continues on either replica, and
another tenant's id is a 404 on both, exactly as an unknown id is."""

from __future__ import annotations

import openai
import pytest

from tests.conftest import ACME_KEY, GLOBEX_KEY, start_gateway
from tests.protocols.responses.conftest import responses_config, responses_fleet  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def replicas(responses_fleet, redis_server, tmp_path_factory):  # noqa: F811
    config = {"store": "redis", "redis_url": redis_server.url}
    gws = [start_gateway(tmp_path_factory.mktemp(f"replica{i}"), responses_fleet,
                         responses_config(responses_fleet, config)) for i in range(2)]
    yield gws
    for gw in gws:
        gw.process.stop()


@pytest.mark.parametrize("model", ["native", "translated"])
def test_a_chain_continues_on_the_other_replica(replicas, model):
    a, b = (gw.client(ACME_KEY) for gw in replicas)
    first = a.responses.create(model=model, input="My name is Ada and I like long walks by the river.")
    alone = b.responses.create(model=model, input="What is my name?")
    chained = b.responses.create(model=model, input="What is my name?", previous_response_id=first.id)
    assert chained.usage.input_tokens > alone.usage.input_tokens + first.usage.output_tokens
    assert a.responses.retrieve(chained.id).previous_response_id == first.id


def test_tenants_are_isolated_across_replicas(replicas):
    mine = replicas[0].client(ACME_KEY).responses.create(model="native", input="a secret")
    for gw in replicas:
        theirs = gw.client(GLOBEX_KEY)
        messages = []
        for rid in (mine.id, "resp_" + "f" * 32):
            with pytest.raises(openai.NotFoundError) as err:
                theirs.responses.retrieve(rid)
            messages.append(err.value.body["message"].replace(rid, "ID"))
            with pytest.raises(openai.BadRequestError) as chained:
                theirs.responses.create(model="native", input="x", previous_response_id=rid)
            assert chained.value.code == "previous_response_not_found"
            with pytest.raises(openai.NotFoundError):
                theirs.responses.input_items.list(rid)
        assert messages[0] == messages[1]
    assert replicas[1].client(ACME_KEY).responses.retrieve(mine.id).id == mine.id


def test_a_delete_on_one_replica_is_seen_by_the_other(replicas):
    r = replicas[0].client(ACME_KEY).responses.create(model="translated", input="short-lived")
    replicas[1].client(ACME_KEY).responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        replicas[0].client(ACME_KEY).responses.retrieve(r.id)
