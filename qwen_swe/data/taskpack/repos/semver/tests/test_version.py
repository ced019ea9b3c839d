import pytest

from semver import Version, coerce, parse, sort_versions


def test_parse_full_version():
    version = parse("1.2.3-rc.1+build.5")
    assert (version.major, version.minor, version.patch) == (1, 2, 3)
    assert version.prerelease == ("rc", "1")
    assert version.build == ("build", "5")


def test_parse_plain_version():
    version = parse("10.20.30")
    assert (version.major, version.minor, version.patch, version.prerelease, version.build) == (10, 20, 30, (), ())


def test_parse_allows_v_prefix_and_spaces():
    assert str(parse("  v1.0.0 ")) == "1.0.0"


def test_parse_build_only():
    assert parse("1.0.0+20240101").build == ("20240101",)


def test_parse_rejects_garbage():
    with pytest.raises(ValueError, match="invalid version: '1.2'"):
        parse("1.2")


def test_format_round_trip():
    assert str(parse("1.2.3-alpha.beta.7+sha.5114f85")) == "1.2.3-alpha.beta.7+sha.5114f85"


def test_core():
    assert parse("4.5.6-rc.2+b1").core == "4.5.6"


def test_repr():
    assert repr(Version(1, 0, 0, "rc.1")) == "Version('1.0.0-rc.1')"


def test_constructor_defaults():
    assert str(Version(3)) == "3.0.0"


def test_constructor_takes_identifier_tuples():
    assert str(Version(1, 2, 0, ("beta", "2"), ["exp", "sha"])) == "1.2.0-beta.2+exp.sha"


def test_number_must_not_be_negative():
    with pytest.raises(ValueError, match="invalid version number: -1"):
        Version(1, -1, 0)


def test_number_must_be_an_int():
    with pytest.raises(ValueError, match="invalid version number: '2'"):
        Version(1, "2", 0)


def test_empty_identifier_is_rejected():
    with pytest.raises(ValueError, match="invalid identifier: ''"):
        Version(1, 0, 0, "rc..1")


def test_is_prerelease():
    assert parse("1.0.0-alpha").is_prerelease
    assert not parse("1.0.0+build").is_prerelease


def test_equality_ignores_build():
    assert parse("1.0.0+a") == parse("1.0.0+b")
    assert hash(parse("1.0.0+a")) == hash(parse("1.0.0"))


def test_compare_with_string():
    assert parse("1.2.3") == "1.2.3"
    assert parse("1.2.3") < "1.10.0"


def test_release_sorts_after_prerelease():
    assert parse("1.0.0-rc.1") < parse("1.0.0")
    assert parse("1.0.0") > parse("1.0.0-rc.1")


def test_specification_order():
    texts = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
             "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"]
    assert [str(v) for v in sort_versions(reversed(texts))] == texts


def test_sort_versions_reverse():
    assert [str(v) for v in sort_versions(["1.2.0", "1.10.0", "1.9.9"], reverse=True)] == ["1.10.0", "1.9.9", "1.2.0"]


def test_coerce():
    version = Version(2, 0, 0)
    assert coerce(version) is version
    assert coerce("2.0.0") == version
