"""Convert raw string values to Python types."""

TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off"}


def to_bool(raw):
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"not a boolean: {raw!r}")


def to_int(raw):
    try:
        return int(raw.strip(), 0)
    except ValueError:
        raise ValueError(f"not an integer: {raw!r}") from None


def to_list(raw, separator=","):
    return [item.strip() for item in raw.split(separator) if item.strip()]
