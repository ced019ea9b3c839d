"""One self-contained HTML page per run folder: steps, samples, conversations, patches, curves (no server, no
network; it opens from disk)."""
