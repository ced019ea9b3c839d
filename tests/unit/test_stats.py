"""The learning benchmark's tests of a before/after difference."""

from __future__ import annotations

import random

import pytest

from qwen_swe.evaluate.stats import one_sided_z, paired_sign_flip


def test_one_sided_z():
    z, p = one_sided_z(10, 64, 25, 64)
    assert z > 2.5 and p < 0.01
    assert one_sided_z(10, 64, 10, 64)[1] == pytest.approx(0.5)
    assert one_sided_z(20, 64, 10, 64)[1] > 0.9


def test_paired_sign_flip_is_exact_and_names_the_tasks():
    gained = paired_sign_flip({"a": 0, "b": 0, "c": 0}, {"a": 2, "b": 2, "c": 2})
    assert gained["p_one_sided"] == pytest.approx(1 / 8)  # of the 8 sign patterns, only the observed reaches +6
    assert gained["gained"] == {"a": 2, "b": 2, "c": 2} and gained["lost"] == {}
    even = paired_sign_flip({"a": 1, "b": 0, "x": 2}, {"a": 0, "b": 1, "x": 2})
    assert even["p_one_sided"] == pytest.approx(3 / 4) and even["lost"] == {"a": 1}
    assert paired_sign_flip({"a": 1}, {"a": 1})["p_one_sided"] == 1.0
    assert paired_sign_flip({"a": 2}, {})["lost"] == {"a": 2}  # a task with no graded attempt at the end counts 0
    rng = random.Random(3)
    for _ in range(20):  # against brute-force enumeration of the sign patterns
        start = {f"t{i}": rng.randint(0, 2) for i in range(9)}
        end = {t: rng.randint(0, 2) for t in start}
        d = [end[t] - start[t] for t in start]
        sums = [sum(x if (mask >> i) & 1 else -x for i, x in enumerate(d)) for mask in range(2 ** len(d))]
        assert paired_sign_flip(start, end)["p_one_sided"] == pytest.approx(sum(t >= sum(d) for t in sums) / len(sums))
