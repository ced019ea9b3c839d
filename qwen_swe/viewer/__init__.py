"""The run viewer: ``viewer.html`` in a run or evaluation folder (steps, samples, conversations, patches, curves,
evaluation reports), with one data file per step and evaluation loaded when opened; no server, no network."""
