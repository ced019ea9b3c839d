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


def test_format_negative_amount_with_cents():
    assert format_amount(-5420) == "-54.20"
    assert format_amount(-50) == "-0.50"
    assert format_amount(-123456) == "-1,234.56"


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


def test_render_report_with_refund():
    text = STATEMENT.replace("2024-03-02,Rent,-900.00", "2024-03-03,Refund correction,-0.50\n2024-03-04,Groceries,-54.20")
    report = render_report(read_entries(text), width=38)
    assert report.splitlines() == [
        "2024-03-01 Salary             2,500.00",
        "2024-03-03 Refund correction     -0.50",
        "2024-03-04 Groceries            -54.20",
        "-" * 38,
        "TOTAL                         2,445.30",
    ]
