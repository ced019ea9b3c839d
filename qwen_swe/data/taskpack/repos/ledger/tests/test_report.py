from ledger import Entry, format_amount, read_entries, render_report

STATEMENT = """date,description,amount
2024-03-01,Salary,"2,500.00"
2024-03-02,Rent,-900.00
"""


def test_format_amount():
    assert format_amount(123450) == "1,234.50"
    assert format_amount(5) == "0.05"


def test_format_negative_whole_amount():
    assert format_amount(-1200) == "-12.00"


def test_read_entries():
    assert read_entries(STATEMENT) == [
        Entry("2024-03-01", "Salary", 250000),
        Entry("2024-03-02", "Rent", -90000),
    ]


def test_render_report():
    report = render_report(read_entries(STATEMENT), width=36)
    assert report.splitlines() == [
        "2024-03-01 Salary           2,500.00",
        "2024-03-02 Rent              -900.00",
        "-" * 36,
        "TOTAL                       1,600.00",
    ]
