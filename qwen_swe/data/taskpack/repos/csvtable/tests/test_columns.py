import pytest

from csvtable import Column, column_widths, even_rows, parse_column


def test_parse_column_bare():
    assert parse_column("name") == Column("name", "<", 0)


def test_parse_column_full():
    assert parse_column(" price : >8 ") == Column("price", ">", 8)


def test_parse_column_width_only():
    assert parse_column("qty:5") == Column("qty", "<", 5)


def test_parse_column_without_width():
    assert parse_column("city:^") == Column("city", "^", 0)


def test_parse_column_bad_spec():
    with pytest.raises(ValueError, match="bad column spec: 'a:b'"):
        parse_column("a:b")


def test_column_bad_name():
    with pytest.raises(ValueError, match="bad column name: '2nd'"):
        Column("2nd")


def test_column_bad_side():
    with pytest.raises(ValueError, match="bad alignment: '='"):
        Column("total", "=")


def test_column_negative_width():
    with pytest.raises(ValueError, match="negative width: -3"):
        Column("total", ">", -3)


def test_even_rows():
    assert even_rows([["a", "b"], ["c"], []], 2) == [["a", "b"], ["c", ""], ["", ""]]


def test_even_rows_too_long():
    with pytest.raises(ValueError, match="row 2 has 3 cells, more than 2"):
        even_rows([["a"], ["b", "c", "d"]], 2)


def test_column_widths():
    columns = [Column("name"), Column("qty", ">")]
    rows = [["apple", "3"], ["kiwi", "1200"]]
    assert column_widths(columns, rows) == [5, 4]


def test_column_widths_fixed_and_header():
    columns = [Column("description", "<", 6), Column("n")]
    assert column_widths(columns, [["a long description", "1"]]) == [6, 1]
    assert column_widths(columns, []) == [6, 1]
