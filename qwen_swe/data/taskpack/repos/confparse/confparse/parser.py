"""Parse configuration text into sections of string values."""

import re

from confparse.lexer import split_assignment, strip_comment
from confparse.values import to_bool, to_int, to_list

SECTION_RE = re.compile(r"\[\s*([^\]]+?)\s*\]")


class ConfigError(ValueError):
    """The configuration text is malformed, or a value is missing or has the wrong type."""


class Config:
    def __init__(self, sections):
        self.sections = sections

    def get(self, section, key, default=None):
        return self.sections.get(section, {}).get(key, default)

    def _require(self, section, key):
        value = self.get(section, key)
        if value is None:
            raise ConfigError(f"missing [{section}] {key}")
        return value

    def get_int(self, section, key):
        try:
            return to_int(self._require(section, key))
        except ValueError as exc:
            raise ConfigError(f"[{section}] {key}: {exc}") from None

    def get_bool(self, section, key):
        try:
            return to_bool(self._require(section, key))
        except ValueError as exc:
            raise ConfigError(f"[{section}] {key}: {exc}") from None

    def get_list(self, section, key):
        return to_list(self._require(section, key))


def loads(text):
    """Parse configuration ``text``; raise ConfigError naming the line of any malformed line."""
    sections = {"": {}}
    current = ""
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = strip_comment(raw_line).strip()
        if not line:
            continue
        header = SECTION_RE.fullmatch(line)
        if header:
            current = header.group(1)
            sections.setdefault(current, {})
            continue
        assignment = split_assignment(line)
        if assignment is None:
            raise ConfigError(f"line {number}: expected 'key = value' or '[section]', got {line!r}")
        key, value = assignment
        if not key:
            raise ConfigError(f"line {number}: empty key")
        sections[current][key] = value
    return Config(sections)
