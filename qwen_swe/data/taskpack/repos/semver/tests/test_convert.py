import pytest

from semver import Version, from_pep440, from_tag, sort_key, to_pep440, to_tag


def test_to_tag():
    assert to_tag("1.2.3") == "v1.2.3"
    assert to_tag(Version(1, 2, 3), "release-") == "release-1.2.3"


def test_from_tag():
    assert from_tag("release-2.0.0-rc.1", "release-") == Version(2, 0, 0, "rc.1")


def test_from_tag_wrong_prefix():
    with pytest.raises(ValueError, match="tag 'v1.0.0' does not start with 'release-'"):
        from_tag("v1.0.0", "release-")


def test_to_pep440():
    assert to_pep440("1.2.3-beta.02") == "1.2.3b2"
    assert to_pep440("1.2.3+build.1") == "1.2.3"


def test_to_pep440_without_spelling():
    with pytest.raises(ValueError, match="no PEP 440 spelling for 1.2.3-dev.1"):
        to_pep440("1.2.3-dev.1")


def test_from_pep440():
    assert str(from_pep440("1.2.3rc4")) == "1.2.3-rc.4"
    assert str(from_pep440("0.1.0")) == "0.1.0"


def test_from_pep440_rejects_other_forms():
    with pytest.raises(ValueError, match="not a PEP 440 version this library understands: '1.2.3.post1'"):
        from_pep440("1.2.3.post1")


def test_sort_key():
    assert sort_key("1.20.3-rc.1") == "00001.00020.00003"
    assert sort_key("7.0.0", width=2) == "07.00.00"


def test_sort_key_too_wide():
    with pytest.raises(ValueError, match="100.0.0 does not fit in 2 digits"):
        sort_key("100.0.0", 2)
