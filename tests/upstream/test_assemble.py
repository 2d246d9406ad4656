"""A non-streamed answer rebuilt from an upstream stream carries everything the stream said: here, the
log-probabilities a client asked for (backends such as llama.cpp and vLLM are streamed upstream even when
the client is not)."""

from __future__ import annotations

import orjson

from app.upstream.assemble import StreamAssembler


def _token(text: str, logprob: float) -> dict:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode()),
            "top_logprobs": [{"token": text, "logprob": logprob, "bytes": list(text.encode())}]}


def test_chat_log_probabilities_are_joined_across_chunks_in_order():
    asm = StreamAssembler(chat=True)
    asm.feed(orjson.dumps({"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}]}))
    asm.feed(orjson.dumps({"id": "x", "choices": [{"index": 0, "delta": {"content": "Hel"},
                                                   "logprobs": {"content": [_token("Hel", -0.1)], "refusal": None}}]}))
    asm.feed(orjson.dumps({"id": "x", "choices": [{"index": 0, "delta": {"content": "lo"},
                                                   "logprobs": {"content": [_token("lo", -0.2)], "refusal": None}}]}))
    asm.feed(orjson.dumps({"id": "x", "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]}))
    choice = asm.result()["choices"][0]
    assert choice["message"]["content"] == "Hello"
    assert choice["logprobs"] == {"content": [_token("Hel", -0.1), _token("lo", -0.2)], "refusal": None}


def test_an_answer_streamed_without_log_probabilities_has_none():
    asm = StreamAssembler(chat=True)
    asm.feed(orjson.dumps({"id": "x", "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]}))
    assert asm.result()["choices"][0]["logprobs"] is None


def test_completion_log_probabilities_join_each_parallel_list():
    asm = StreamAssembler(chat=False)
    for text, lp, offset in (("Hel", -0.1, 0), ("lo", -0.2, 3)):
        asm.feed(orjson.dumps({"id": "x", "choices": [{"index": 0, "text": text, "logprobs": {
            "tokens": [text], "token_logprobs": [lp], "top_logprobs": [{text: lp}], "text_offset": [offset]}}]}))
    choice = asm.result()["choices"][0]
    assert choice["text"] == "Hello"
    assert choice["logprobs"] == {"tokens": ["Hel", "lo"], "token_logprobs": [-0.1, -0.2],
                                  "top_logprobs": [{"Hel": -0.1}, {"lo": -0.2}], "text_offset": [0, 3]}


def test_a_completion_list_missing_from_some_chunks_stays_aligned_with_the_tokens():
    # top_logprobs is null or missing in some chunks and a list in others:
    # each token keeps its own entry, the missing ones as null, rather than shifting the later ones up.
    asm = StreamAssembler(chat=False)
    chunks = ({"tokens": ["a"], "top_logprobs": None}, {"tokens": ["b", "c"], "top_logprobs": [{"b": -0.2}, {"c": -0.3}]},
              {"tokens": ["d"]}, {"tokens": ["e"], "top_logprobs": [{"e": -0.5}]})
    for chunk in chunks:
        asm.feed(orjson.dumps({"id": "x", "choices": [{"index": 0, "text": "".join(chunk["tokens"]), "logprobs": chunk}]}))
    logprobs = asm.result()["choices"][0]["logprobs"]
    assert logprobs["tokens"] == ["a", "b", "c", "d", "e"]
    assert logprobs["top_logprobs"] == [None, {"b": -0.2}, {"c": -0.3}, None, {"e": -0.5}]


def test_a_completion_list_null_in_every_chunk_stays_null():
    asm = StreamAssembler(chat=False)
    for text in ("a", "b"):
        asm.feed(orjson.dumps({"id": "x", "choices": [{"index": 0, "text": text, "logprobs": {
            "tokens": [text], "token_logprobs": [-0.1], "top_logprobs": None}}]}))
    assert asm.result()["choices"][0]["logprobs"]["top_logprobs"] is None


def test_each_choice_keeps_its_own_log_probabilities():
    asm = StreamAssembler(chat=True)
    for index, text in ((0, "a"), (1, "b"), (0, "c")):
        asm.feed(orjson.dumps({"id": "x", "choices": [{"index": index, "delta": {"content": text},
                                                       "logprobs": {"content": [_token(text, -1.0)]}}]}))
    first, second = asm.result()["choices"]
    assert [t["token"] for t in first["logprobs"]["content"]] == ["a", "c"]
    assert [t["token"] for t in second["logprobs"]["content"]] == ["b"]


def test_an_event_with_nothing_in_it_does_not_break_the_answer():
    # llama-server opens the stream of a prompt list with `data: null`.
    asm = StreamAssembler(chat=False)
    asm.feed(b"null")
    asm.feed(orjson.dumps({"id": "x", "choices": [{"index": 0, "text": "blue", "finish_reason": "stop"}]}))
    assert not asm.broken and asm.result()["choices"][0]["text"] == "blue"
