"""The one exception urlkit raises, and a helper to raise it."""


class URLError(ValueError):
    """A URL, query string or percent escape that cannot be parsed."""


def check(condition, message):
    """Raise ``URLError(message)`` unless ``condition`` holds."""
    if not condition:
        raise URLError(message)
