"""Exact keys and semantic scopes: what separates two requests' answers."""

from __future__ import annotations

from app.cache.keys import exact_key, is_deterministic, semantic_query
from app.protocols import CHAT


def req(**body):
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    return CHAT.parse(__import__("orjson").dumps({**base, **body}))


def test_delivery_fields_do_not_change_the_key():
    assert exact_key("t", req()) == exact_key("t", req(stream=True, stream_options={"include_usage": True}, user="u"))


def test_tenant_alias_and_parameters_change_the_key():
    k = exact_key("t", req())
    assert k != exact_key("t2", req())
    assert k != exact_key("t", req(model="m2"))
    assert k != exact_key("t", req(max_tokens=5))
    assert k != exact_key("t", req(tool_choice="none"))


def test_key_is_independent_of_field_order():
    a = CHAT.parse(b'{"model":"m","temperature":0,"messages":[{"role":"user","content":"x"}]}')
    b = CHAT.parse(b'{"messages":[{"content":"x","role":"user"}],"model":"m","temperature":0}')
    assert exact_key("t", a) == exact_key("t", b)


def test_keys_hold_no_clear_text():
    k = exact_key("tenant-secret", req(messages=[{"role": "user", "content": "my password is hunter2"}]))
    assert "hunter2" not in k and "tenant-secret" not in k and len(k) == 64


def test_determinism():
    assert is_deterministic({"temperature": 0})
    assert is_deterministic({"temperature": 0.8, "seed": 1})
    assert not is_deterministic({})
    assert not is_deterministic({"temperature": 0, "n": 2})


def test_semantic_scope_holds_earlier_turns_and_system_prompt():
    def q(messages, **kw):
        return semantic_query("t", req(messages=messages, **kw))

    last = {"role": "user", "content": "and then?"}
    a = q([{"role": "system", "content": "be brief"}, last])
    b = q([{"role": "system", "content": "be verbose"}, last])
    c = q([{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"}, last])
    assert a.text == b.text == c.text == "and then?"
    assert len({a.scope, b.scope, c.scope}) == 3


def test_semantic_eligibility():
    assert semantic_query("t", req()) is not None
    assert semantic_query("t", req(temperature=1)) is None
    assert semantic_query("t", req(tools=[{"type": "function", "function": {"name": "f"}}])) is None
    assert semantic_query("t", req(logprobs=True)) is None
    image = [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "data:"}}]
    assert semantic_query("t", req(messages=[{"role": "user", "content": image}])) is None
    assert semantic_query("t", req(messages=[{"role": "assistant", "content": "hi"}])) is None


def _scope(text: str) -> str:
    query = semantic_query("t", req(messages=[{"role": "user", "content": text}]))
    assert query is not None
    return query.scope


def test_code_indented_another_way_is_another_scope_and_spaces_around_a_question_are_not():
    program = "What does this print?\n\nfor i in range(3):\n    print(i)\n    print('done')"
    assert _scope(program) != _scope(program.replace("    print('done')", "print('done')"))
    assert _scope(program) == _scope("\n".join("  " + line for line in program.splitlines()))  # all shifted alike
    assert _scope("   Is it normal for gums to bleed?  ") == _scope("Is it normal for gums to bleed?")
