"""slime's data source for SWE-bench instances
(``--data-source-path examples.qwen_swe.data_source.SWEBenchDataSource``)."""

from qwen_swe.data.source import SWEBenchDataSource, load_instances  # noqa: F401
