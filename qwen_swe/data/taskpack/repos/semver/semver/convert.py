"""Other spellings of a version: git tags, PEP 440 and zero-padded sort keys."""

import re

from semver.version import Version, coerce, parse

_PEP440 = re.compile(r"(\d+\.\d+\.\d+)(?:(a|b|rc)(\d+))?")
_TO_PEP440 = {"alpha": "a", "beta": "b", "rc": "rc"}
_FROM_PEP440 = {"a": "alpha", "b": "beta", "rc": "rc"}


def to_tag(version, prefix="v"):
    """``"1.2.3"`` -> ``"v1.2.3"``."""
    return prefix + str(coerce(version))


def from_tag(tag, prefix="v"):
    """``"v1.2.3"`` -> ``Version("1.2.3")``; ``from_tag("release-1.2.3", "release-")`` works the same way."""
    if not tag.startswith(prefix): raise ValueError("tag %r does not start with %r" % (tag, prefix))
    return parse(tag[len(prefix):])


def to_pep440(version):
    """``"1.2.3-rc.1"`` -> ``"1.2.3rc1"``; only alpha, beta and rc prereleases have a PEP 440 spelling."""
    version = coerce(version)
    pre = version.prerelease
    if not pre: return version.core
    if len(pre) != 2 or pre[0] not in _TO_PEP440: raise ValueError("no PEP 440 spelling for %s" % version)
    return version.core + _TO_PEP440[pre[0]] + str(int(pre[1]))


def from_pep440(text):
    """``"1.2.3rc1"`` -> ``Version("1.2.3-rc.1")``."""
    match = _PEP440.fullmatch(text)
    if match is None: raise ValueError("not a PEP 440 version this library understands: %r" % (text,))
    core = parse(match.group(1))
    pre = (_FROM_PEP440[match.group(2)], match.group(3)) if match.group(2) else ()
    return Version(core.major, core.minor, core.patch, pre)


def sort_key(version, width=5):
    """``"1.2.3"`` -> ``"00001.00002.00003"``: a string that sorts like the release numbers."""
    version = coerce(version)
    numbers = (version.major, version.minor, version.patch)
    if max(numbers) >= 10 ** width: raise ValueError("%s does not fit in %d digits" % (version, width))
    return ".".join(str(number).rjust(width, "0") for number in numbers)
