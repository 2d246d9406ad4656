"""The API surface SDKs expect, in front of a real llama-server: its off-spec usage chunk on
/v1/completions and its `max_tokens: -1` (issue 18)."""

from __future__ import annotations


def test_completions_stream_usage_arrives_on_its_own_chunk(real):
    # llama-server puts /v1/completions' usage on its last choice chunk; the client gets it apart.
    chunks = list(real.client().completions.create(model="a", prompt="Once upon a time", max_tokens=6, stream=True,
                                                   stream_options={"include_usage": True}))
    with_usage = [c for c in chunks if c.usage is not None]
    assert len(with_usage) == 1 and with_usage[0] is chunks[-1] and chunks[-1].choices == []
    assert 0 < chunks[-1].usage.completion_tokens <= 6
    assert any(c.choices and c.choices[0].finish_reason for c in chunks[:-1])


def test_max_tokens_minus_one_is_llamacpps_to_take(real):
    r = real.client().chat.completions.create(model="a", messages=[{"role": "user", "content": "Say hi."}],
                                              max_tokens=-1, temperature=0)
    assert r.choices[0].message.content and r.usage.completion_tokens > 0


def test_models_retrieve(real):
    assert real.client().models.retrieve("a").id == "a"
