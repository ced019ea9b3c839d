"""Run settings: sections owned by the components, composed and parsed once per process."""
