"""semver: parse, compare, bump and match semantic version strings."""

from semver.bump import bump, bump_major, bump_minor, bump_patch, bump_prerelease, diff
from semver.convert import from_pep440, from_tag, sort_key, to_pep440, to_tag
from semver.ranges import expand, expand_term, max_satisfying, satisfies
from semver.version import Version, coerce, parse, sort_versions

__all__ = [
    "Version",
    "bump",
    "bump_major",
    "bump_minor",
    "bump_patch",
    "bump_prerelease",
    "coerce",
    "diff",
    "expand",
    "expand_term",
    "from_pep440",
    "from_tag",
    "max_satisfying",
    "parse",
    "satisfies",
    "sort_key",
    "sort_versions",
    "to_pep440",
    "to_tag",
]
