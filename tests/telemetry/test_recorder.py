"""The record stage teaches the latency model: a stream's wait at its first token, its decode speed
while it runs, and whole answers when they end."""

from __future__ import annotations

from app.config import TelemetryConfig
from app.record import AttemptRecord, RequestRecord, Usage
from app.routing.latency_model import LatencyModel
from app.routing.predict import Estimate
from app.telemetry.recorder import Telemetry


class State:
    inflight = 3


def stream_attempt(load: int, wait: float, predicted_queue: float = 0.0) -> AttemptRecord:
    a = AttemptRecord(1, "m", "b", "openai", "127.0.0.1", 1, "m", True, start=100.0, load=load,
                      predicted=Estimate(predicted_queue, 0.01 + predicted_queue, 1.0, 50))
    a.headers, a.first_event = 100.001, 100.001 + wait
    return a


def telemetry() -> tuple[Telemetry, LatencyModel]:
    model = LatencyModel()
    return Telemetry(TelemetryConfig(metrics=False), {"b": model}), model


def test_a_first_token_that_waited_behind_others_teaches_the_slot_count_at_once():
    t, model = telemetry()
    model.observe_prefill(100, 0.01, now=0)
    t.learn_first_token(stream_attempt(load=5, wait=0.8), prompt_tokens=100)  # 4 ahead, 0.8 s wait
    assert model.slots == 4


def test_a_first_token_with_nothing_ahead_is_prefill():
    t, model = telemetry()
    for _ in range(3):
        t.learn_first_token(stream_attempt(load=1, wait=0.05), prompt_tokens=500)
    assert abs(model.prefill_s(500) - 0.05) < 0.01 and model.slots is None  # the prior is 0.1 s


def test_decode_speed_is_sampled_while_the_stream_runs():
    t, model = telemetry()
    a = stream_attempt(load=1, wait=0.01)
    t.learn_progress(a, State(), 8, a.first_event + 7 * 0.2)  # 8 events, 7 steps of 200 ms
    assert model.tpot_base.samples == 1 and model.output_tokens.samples == 0
    assert model.tpot(1) > 0.15
    t.learn_progress(a, State(), 16, a.first_event + 7 * 0.2 + 8 * 0.05)  # then 8 steps of 50 ms
    assert model.tpot_base.samples == 2


def test_a_finished_stream_teaches_decode_and_output_length():
    t, model = telemetry()
    r = RequestRecord("id", "chat", 0.0, usage=Usage(100, 41))
    a = stream_attempt(load=1, wait=0.01)
    a.end = a.first_event + 40 * 0.02
    r.attempt_log.append(a)
    t.learn(r)
    assert abs(model.tpot(1) - 0.02) < 1e-6 and model.output_tokens.value == 41
