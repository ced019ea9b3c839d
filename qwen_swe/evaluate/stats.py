"""The tests behind the learning benchmark's before/after comparisons: a pooled two-proportion z-test and an exact
paired sign-flip test over tasks. (The evaluation report's interval and pass@k are in ``report``.)"""

from __future__ import annotations

import math
from typing import Any


def one_sided_z(success_a: int, n_a: int, success_b: int, n_b: int) -> tuple[float, float]:
    """z and p for H1: rate b > rate a (pooled two-proportion z-test)."""
    pooled = (success_a + success_b) / max(n_a + n_b, 1)
    se = math.sqrt(max(pooled * (1 - pooled) * (1 / max(n_a, 1) + 1 / max(n_b, 1)), 1e-12))
    z = (success_b / max(n_b, 1) - success_a / max(n_a, 1)) / se
    return z, 0.5 * math.erfc(z / math.sqrt(2))


def paired_sign_flip(before: dict[str, int], after: dict[str, int]) -> dict[str, Any]:
    """Start and end on the same held-out tasks, paired by task: the tasks whose resolved count rose or fell, and
    the exact one-sided p of the sign-flip (permutation) test of H1 "the end resolves more": under H0 each task's
    change d_i is as likely -d_i, so p = P(sum of +-|d_i| >= sum of d_i) over all 2^m sign patterns (by counting).
    The pooled z-test treats the two evaluations as independent samples; this one removes what the tasks share."""
    ids = sorted(set(before) | set(after))
    diffs = {i: after.get(i, 0) - before.get(i, 0) for i in ids}
    ways = {0: 1}  # sum -> number of sign patterns reaching it
    for d in (abs(d) for d in diffs.values() if d):
        nxt: dict[int, int] = {}
        for total, n in ways.items():
            for signed in (d, -d):
                nxt[total + signed] = nxt.get(total + signed, 0) + n
        ways = nxt
    observed = sum(diffs.values())
    p = sum(n for total, n in ways.items() if total >= observed) / sum(ways.values())
    return {
        "gained": {i: d for i, d in diffs.items() if d > 0},
        "lost": {i: -d for i, d in diffs.items() if d < 0},
        "p_one_sided": p,
    }
