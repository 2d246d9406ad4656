"""Answer lengths are learned per alias and request shape (API, max_tokens, stop), not per backend."""

from app.routing.output_length import MIN_SAMPLES, OutputLengths, shape_of


def test_shapes_of_one_alias_are_predicted_apart():
    o = OutputLengths()
    short, long = shape_of("chat/completions", 16, ["\n"]), shape_of("completions", None, None)
    for _ in range(10):
        o.observe("chat", short, 12, now=1.0)
        o.observe("chat", long, 400, now=1.0)
    assert abs(o.predict("chat", short, 2.0) - 12) < 1
    assert abs(o.predict("chat", long, 2.0) - 400) < 1


def test_max_tokens_share_a_shape_up_to_the_next_power_of_two():
    assert shape_of("chat/completions", 20, None) == shape_of("chat/completions", 32, None)
    assert shape_of("chat/completions", 20, None) != shape_of("chat/completions", 33, None)
    assert shape_of("chat/completions", 20, None) != shape_of("chat/completions", 20, ["stop"])


def test_a_new_shape_borrows_the_alias_api_figure_until_it_has_answers():
    o = OutputLengths()
    seen = shape_of("chat/completions", 256, None)
    for _ in range(10):
        o.observe("chat", seen, 100, now=1.0)
    new = shape_of("chat/completions", 1024, None)
    assert o.predict("chat", new, 1.0) == 100
    assert o.predict("other", new, 1.0) is None
    for _ in range(MIN_SAMPLES + 20):
        o.observe("chat", new, 700, now=1.0)
    assert o.predict("chat", new, 1.0) > 650


def test_a_change_of_answers_is_followed_within_a_few_dozen_requests_not_minutes():
    o = OutputLengths()
    s = shape_of("chat/completions", 512, None)
    for _ in range(50):
        o.observe("chat", s, 400, now=1.0)
    for _ in range(30):
        o.observe("chat", s, 50, now=1.1)
    assert o.predict("chat", s, 1.1) < 70
