"""Compute the next version."""

from semver.version import Version, coerce, parse

PARTS = ("major", "minor", "patch")


def bump_major(version):
    """``1.2.3`` -> ``2.0.0``."""
    version = coerce(version)
    return Version(version.major + 1)


def bump_minor(version):
    """``1.2.3`` -> ``1.3.0``."""
    version = coerce(version)
    return Version(version.major, version.minor + 1)


def bump_patch(version):
    """``1.2.3`` -> ``1.2.4``; a prerelease becomes its release: ``1.2.4-rc.1`` -> ``1.2.4``."""
    version = coerce(version)
    return parse(version.core) if version.prerelease else Version(version.major, version.minor, version.patch + 1)


def bump(version, part):
    """Bump by name: ``bump("1.2.3", "minor")`` -> ``Version("1.3.0")``."""
    if part not in PARTS: raise ValueError("cannot bump %r, expected one of: %s" % (part, ", ".join(PARTS)))
    return {"major": bump_major, "minor": bump_minor, "patch": bump_patch}[part](version)


def bump_prerelease(version, label="rc"):
    """``1.2.3`` -> ``1.2.4-rc.1``; ``1.2.4-rc.1`` -> ``1.2.4-rc.2``; another label starts again at 1."""
    version = coerce(version)
    if not version.prerelease: return parse(bump_patch(version).core + "-" + label + ".1")
    if len(version.prerelease) != 2: raise ValueError("expected a prerelease like rc.1, got %s" % version)
    current, number = version.prerelease
    if current != label: return parse(version.core + "-" + label + ".1")
    return parse(version.core + "-" + label + "." + str(int(number) + 1))


def diff(a, b):
    """The most significant part that differs: "major", "minor", "patch", "prerelease" or None."""
    a, b = coerce(a), coerce(b)
    for part in PARTS:
        if getattr(a, part) != getattr(b, part): return part
    return "prerelease" if a.prerelease != b.prerelease else None
