"""Version ranges: ``>=1.2.0 <2.0.0``, ``^1.2``, ``~1.2.3``, ``1.2`` and ``1.2.3 - 2.0.0``."""

import operator
import re

from semver.bump import bump_major, bump_minor
from semver.version import Version, coerce, parse

_TERM = re.compile(r"(>=|<=|>|<|=|\^|~)?(v?\d\S*)")
_COMPARISON = re.compile(r"(>=|<=|>|<|=)(\S+)")
_OPERATORS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "=": operator.eq}


def _lower_bound(text):
    """``"1.2"`` -> ``(Version("1.2.0"), 2)``: the version with missing numbers as zeros, and how many were given."""
    numbers = text.split(".")
    if len(numbers) >= 3: return parse(text), 3
    major, minor, patch = [int(number) for number in numbers] + [0] * (3 - len(numbers))
    return Version(major, minor, patch), len(numbers)


def _caret_limit(low, given):
    """The first version ``^low`` excludes: the left-most non-zero number given is kept."""
    if low.major or given == 1: return bump_major(low)
    if low.minor or given == 2: return bump_minor(low)
    return Version(0, 0, low.patch + 1)


def _between(low, high):
    return ">=" + str(low) + " <" + str(high)


def expand_term(term):
    """One term as plain comparisons: ``"^1.2"`` -> ``">=1.2.0 <2.0.0"``, ``"1.2"`` -> ``">=1.2.0 <1.3.0"``."""
    match = _TERM.fullmatch(term)
    if match is None: raise ValueError("invalid range term: %r" % (term,))
    op = match.group(1) or "="
    low, given = _lower_bound(match.group(2))
    if op == "^": return _between(low, _caret_limit(low, given))
    if op == "~" or given < 3: return _between(low, bump_major(low) if given == 1 else bump_minor(low))
    return op + str(low)


def expand(spec):
    """A whole range, terms separated by spaces: ``"^1.2 <1.5.0"``; ``"1.2.3 - 2.0.0"`` is inclusive."""
    if " - " not in spec: return " ".join(expand_term(term) for term in spec.split())
    low, high = spec.split(" - ", 1)
    return ">=" + str(parse(low)) + " <=" + str(parse(high))


def satisfies(version, spec):
    """Whether ``version`` is inside the range ``spec``."""
    version = coerce(version)
    for comparison in expand(spec).split():
        match = _COMPARISON.fullmatch(comparison)
        if not _OPERATORS[match.group(1)](version, parse(match.group(2))): return False
    return True


def max_satisfying(versions, spec):
    """The highest of ``versions`` inside ``spec``, or None."""
    matching = [version for version in map(coerce, versions) if satisfies(version, spec)]
    return max(matching) if matching else None
