from textkit import slugify


def test_basic():
    assert slugify("Hello, World!") == "hello-world"


def test_accents_are_dropped():
    assert slugify("Crème Brûlée") == "creme-brulee"


def test_custom_separator():
    assert slugify("a b  c", separator="_") == "a_b_c"


def test_empty():
    assert slugify("!!!") == ""
