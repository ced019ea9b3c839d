"""The evaluation report: the swebench harness's run-report keys, plus pass@k, a confidence interval and the
per-attempt results.

The harness reports one prediction per instance; with several attempts, its keys here describe each instance's
first attempt (what a one-line-per-instance predictions file would get), and ``pass_at_k`` covers them all.
Infrastructure failures are ``error``, never ``unresolved``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

RESOLVED, UNRESOLVED, EMPTY, ERROR = "resolved", "unresolved", "empty_patch", "error"


@dataclass(frozen=True)
class AttemptResult:
    instance_id: str
    attempt: int
    outcome: str  # RESOLVED | UNRESOLVED | EMPTY | ERROR
    reason: str | None = None
    seconds: float = 0.0


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n attempts with c successes: 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} attempts, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a proportion (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def build_report(
    results: Iterable[AttemptResult],
    *,
    dataset_ids: Iterable[str],
    submitted_ids: Iterable[str],
    unknown_ids: Iterable[str] = (),
    bad_lines: Iterable[str] = (),
    seconds: float = 0.0,
) -> dict[str, Any]:
    results = sorted(results, key=lambda r: (r.instance_id, r.attempt))
    first = {r.instance_id: r for r in reversed(results)}  # the lowest attempt wins
    by = {
        kind: sorted(i for i, r in first.items() if r.outcome == kind) for kind in (RESOLVED, UNRESOLVED, EMPTY, ERROR)
    }
    completed = sorted(by[RESOLVED] + by[UNRESOLVED])
    submitted = sorted(set(submitted_ids))
    report: dict[str, Any] = {
        "total_instances": len(set(dataset_ids)),
        "submitted_instances": len(submitted),
        "completed_instances": len(completed),
        "resolved_instances": len(by[RESOLVED]),
        "unresolved_instances": len(by[UNRESOLVED]),
        "empty_patch_instances": len(by[EMPTY]),
        "error_instances": len(by[ERROR]),
        "completed_ids": completed,
        "incomplete_ids": sorted(set(submitted) - set(first)),
        "empty_patch_ids": by[EMPTY],
        "submitted_ids": submitted,
        "resolved_ids": by[RESOLVED],
        "unresolved_ids": by[UNRESOLVED],
        "error_ids": by[ERROR],
        "schema_version": 2,
    }
    report.update(
        _attempt_stats(results),
        unknown_ids=sorted(set(unknown_ids)),
        bad_lines=list(bad_lines),
        seconds=round(seconds, 3),
        attempts=[vars(r) for r in results],
    )
    return report


def _attempt_stats(results: list[AttemptResult]) -> dict[str, Any]:
    """pass@k over the graded attempts of each instance (errors are not attempts the model made)."""
    per: dict[str, list[bool]] = {}
    for r in results:
        if r.outcome != ERROR:
            per.setdefault(r.instance_id, []).append(r.outcome == RESOLVED)
    graded = [x for xs in per.values() for x in xs]
    lo, hi = wilson(sum(graded), len(graded))
    k_max = min((len(xs) for xs in per.values()), default=0)
    return {
        "graded_attempts": len(graded),
        "resolve_rate": sum(graded) / len(graded) if graded else 0.0,
        "resolve_rate_ci95": [lo, hi],
        "pass_at_k": {
            str(k): sum(pass_at_k(len(xs), sum(xs), k) for xs in per.values()) / len(per) for k in range(1, k_max + 1)
        }
        if per
        else {},
    }
