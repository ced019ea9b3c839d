"""confparse: read INI-style configuration text."""

from confparse.parser import Config, ConfigError, loads

__all__ = ["Config", "ConfigError", "loads"]
