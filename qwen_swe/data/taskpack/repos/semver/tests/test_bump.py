import pytest

from semver import bump, bump_major, bump_minor, bump_patch, bump_prerelease, diff


def test_bump_major():
    assert str(bump_major("0.4.1-rc.1+b7")) == "1.0.0"


def test_bump_minor():
    assert str(bump_minor("1.0.7")) == "1.1.0"


def test_bump_patch():
    assert str(bump_patch("2.3.0")) == "2.3.1"


def test_bump_patch_of_prerelease_is_its_release():
    assert str(bump_patch("2.3.1-rc.2")) == "2.3.1"


def test_bump_by_name():
    assert str(bump("1.0.3", "minor")) == "1.1.0"
    assert str(bump("0.2.3", "major")) == "1.0.0"
    assert str(bump("1.2.0", "patch")) == "1.2.1"


def test_bump_unknown_part():
    with pytest.raises(ValueError, match="cannot bump 'build', expected one of: major, minor, patch"):
        bump("1.2.3", "build")


def test_bump_prerelease_of_release():
    assert str(bump_prerelease("1.2.3")) == "1.2.4-rc.1"


def test_bump_prerelease_number():
    assert str(bump_prerelease("1.2.4-beta.9", "beta")) == "1.2.4-beta.10"


def test_bump_prerelease_new_label():
    assert str(bump_prerelease("1.2.4-alpha.3", "beta")) == "1.2.4-beta.1"


def test_bump_prerelease_needs_two_identifiers():
    with pytest.raises(ValueError, match="expected a prerelease like rc.1, got 1.0.0-rc"):
        bump_prerelease("1.0.0-rc")


def test_diff():
    assert diff("1.2.3", "2.2.3") == "major"
    assert diff("1.2.3", "1.3.0") == "minor"
    assert diff("1.2.3", "1.2.4") == "patch"
    assert diff("1.2.3-rc.1", "1.2.3") == "prerelease"
    assert diff("1.2.3+a", "1.2.3+b") is None
