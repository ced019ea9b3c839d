import pytest

from csvtable import (
    markdown_rule, parse_csv, render_csv, render_markdown, render_record, render_table, rule, title_rule,
)

ROWS = [["apple", 3, 1.5, "fresh"], ["kiwi", 12, 0.25], ["banana split", None, 10.0, True]]


def test_rule():
    assert rule([3, 1]) == "+-----+---+"
    assert rule([2], "*", "=") == "*====*"


def test_title_rule():
    assert title_rule("Fruit", 17) == "+---- Fruit ----+"
    assert title_rule("Hi", 10, "*", "=") == "*== Hi ==*"


def test_title_rule_too_long():
    with pytest.raises(ValueError, match="wider than 6"):
        title_rule("Long title", 8)


def test_render_table_with_title():
    assert render_table(["name", "qty:>5"], [["apple", 3], ["kiwi", 12]], "Fruit").splitlines() == [
        "+---- Fruit ----+",
        "| name  |  qty  |",
        "+-------+-------+",
        "| apple |     3 |",
        "| kiwi  |    12 |",
        "+-------+-------+",
    ]


def test_render_table():
    assert render_table(["name", "qty:>5", "price:>", "note:^"], ROWS).splitlines() == [
        "+--------------+-------+-------+-------+",
        "|     name     |  qty  | price | note  |",
        "+--------------+-------+-------+-------+",
        "| apple        |     3 |  1.50 | fresh |",
        "| kiwi         |    12 |  0.25 |       |",
        "| banana split |       | 10.00 |  yes  |",
        "+--------------+-------+-------+-------+",
    ]


def test_render_table_truncates_fixed_width():
    assert render_table(["title:8"], [["A very long title"], ["Short"]]).splitlines() == [
        "+----------+",
        "|  title   |",
        "+----------+",
        "| A ver... |",
        "| Short    |",
        "+----------+",
    ]


def test_render_table_row_too_long():
    with pytest.raises(ValueError, match="row 1 has 2 cells, more than 1"):
        render_table(["a"], [[1, 2]])


def test_markdown_rule():
    assert markdown_rule([3, 5, 4], "<>^") == "| :-- | ----: | :--: |"


def test_render_markdown():
    text = render_markdown(["name", "qty:>", "city:^"], [["Ann", 3, "Oslo"], ["Bo", 12]])
    assert text.splitlines() == [
        "| name | qty | city |",
        "| :--- | --: | :--: |",
        "| Ann  |   3 | Oslo |",
        "| Bo   |  12 |      |",
    ]


def test_render_record():
    assert render_record(["name", "quantity", "ok"], ["apple", 3, True]).splitlines() == [
        "    name: apple",
        "quantity: 3",
        "      ok: yes",
    ]


def test_render_record_separator():
    assert render_record(["a", "bb"], [1.5, None], " = ") == " a = 1.50\nbb = "


def test_render_markdown_narrow_column():
    assert render_markdown(["n:>"], [[1]]).splitlines() == ["| n   |", "| --: |", "|   1 |"]


def test_render_csv():
    rows = [["Ann", 'says "hi"'], ["Bo, Jr.", None], ["  x", 2.5]]
    assert render_csv(["name", "note:>"], rows) == 'name,note\nAnn,"says ""hi"""\n"Bo, Jr.",\n"  x",2.50\n'


def test_render_csv_semicolons():
    assert render_csv(["a", "b"], [[1, "x;y"]], ";") == 'a;b\n1;"x;y"\n'


def test_parse_csv_records():
    text = 'name,note\nAnn,"says ""hi"""\n  \n"Bo, Jr.",\n'
    assert parse_csv(text) == [{"name": "Ann", "note": 'says "hi"'}, {"name": "Bo, Jr.", "note": ""}]


def test_parse_csv_header_only():
    assert parse_csv("a;b\n", ";") == []


def test_parse_csv_wrong_field_count():
    with pytest.raises(ValueError, match="line 3 has 1 fields, expected 2"):
        parse_csv("a,b\n1,2\n3\n")
