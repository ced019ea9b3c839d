"""The default-update benchmark's arithmetic: the chance a run's groups hold both outcomes at least once."""

from __future__ import annotations

import itertools

import pytest

from benchmarks.bench_default_updates import interval, mixed_groups, no_update, p_update


def test_a_group_has_one_outcome_only_at_the_binomial_chance():
    # Enumerate every outcome of 4 attempts at p = 0.3 and add up the all-equal ones.
    p, n = 0.3, 4
    exact = sum(p ** sum(o) * (1 - p) ** (n - sum(o)) for o in itertools.product([0, 1], repeat=n) if sum(o) in (0, n))
    assert no_update(p, n) == pytest.approx(exact)
    assert no_update(0.0, n) == 1.0 and no_update(1.0, n) == 1.0


def test_a_run_updates_unless_every_group_is_all_equal():
    assert p_update([0.0, 1.0, 0.0], 4) == 0.0
    assert p_update([0.5], 4) == pytest.approx(1 - 2 / 16)
    assert p_update([0.5, 0.5], 4) == pytest.approx(1 - (2 / 16) ** 2)


def test_the_interval_holds_the_estimate_and_narrows_with_attempts():
    low, high = interval([2, 2], 10, 4, seed=0)
    assert low < p_update([0.2, 0.2], 4) < high
    wide = interval([1, 1], 5, 4, seed=0)
    narrow = interval([8, 8], 40, 4, seed=0)
    assert narrow[1] - narrow[0] < wide[1] - wide[0]


def test_attempts_are_cut_into_whole_groups_in_order():
    assert mixed_groups([True, False, True, True, False, False, False, False], 4) == (1, 2)
    assert mixed_groups([True, True, True, True, True], 4) == (0, 1)  # the fifth attempt makes no group
