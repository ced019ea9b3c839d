"""Parse, format and order semantic versions."""

import re
from functools import total_ordering

_PATTERN = re.compile(r"v?(\d+\.\d+\.\d+)(?:-([0-9A-Za-z.-]+))?(?:\+([0-9A-Za-z.-]+))?")
_IDENTIFIER = re.compile(r"[0-9A-Za-z-]+")


def _number(value):
    """``value`` if it is a valid version number (a non-negative int), else ValueError."""
    if not isinstance(value, int) or value < 0: raise ValueError("invalid version number: %r" % (value,))
    return value


def _identifiers(values):
    """Prerelease or build identifiers as a tuple of strings: ``"rc.1"`` -> ``("rc", "1")``, None -> ``()``."""
    values = tuple(values.split(".")) if isinstance(values, str) else tuple(values or ())
    for value in values:
        if not _IDENTIFIER.fullmatch(value): raise ValueError("invalid identifier: %r" % (value,))
    return values


def _identifier_key(identifier):
    """Numeric identifiers sort by value and before alphanumeric ones."""
    return (0, int(identifier), "") if identifier.isdigit() else (1, 0, identifier)


@total_ordering
class Version:
    """A semantic version: ``major.minor.patch``, then optional prerelease and build identifiers."""

    def __init__(self, major, minor=0, patch=0, prerelease=(), build=()):
        self.major = _number(major)
        self.minor = _number(minor)
        self.patch = _number(patch)
        self.prerelease = _identifiers(prerelease)
        self.build = _identifiers(build)

    @property
    def core(self):
        """``"1.2.3"``: the three numbers without prerelease or build."""
        return "%d.%d.%d" % (self.major, self.minor, self.patch)

    @property
    def is_prerelease(self):
        return bool(self.prerelease)

    def __str__(self):
        pre = "-" + ".".join(self.prerelease) if self.prerelease else ""
        build = "+" + ".".join(self.build) if self.build else ""
        return self.core + pre + build

    def __repr__(self):
        return "Version(%r)" % str(self)

    def _key(self):
        """What ordering compares: build metadata is ignored, a release sorts after its prereleases."""
        pre = tuple(_identifier_key(identifier) for identifier in self.prerelease)
        return (self.major, self.minor, self.patch, not self.prerelease, pre)

    def __eq__(self, other):
        return self._key() == coerce(other)._key()

    def __lt__(self, other):
        return self._key() < coerce(other)._key()

    def __hash__(self):
        return hash(self._key())


def parse(text):
    """Parse ``"1.2.3-rc.1+build.5"`` into a Version; a leading ``v`` and surrounding spaces are allowed."""
    match = _PATTERN.fullmatch(text.strip())
    if match is None: raise ValueError("invalid version: %r" % (text,))
    major, minor, patch = map(int, match.group(1).split("."))
    return Version(major, minor, patch, match.group(2), match.group(3))


def coerce(value):
    """``value`` as a Version: a Version is returned as it is, a string is parsed."""
    return parse(value) if isinstance(value, str) else value


def sort_versions(values, reverse=False):
    """The versions (strings or Versions) in ascending order, or descending with ``reverse``."""
    return sorted(map(coerce, values), reverse=reverse)
