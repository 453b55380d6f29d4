"""Where a run's results are kept: locations as local paths or fsspec URLs (``storage``), the journal
that is the source of truth for resume (``journal``), and compile traces unpacked beside the report
(``traces``). The lowest floor of the driver: it imports nothing else of ``orchestrator``."""
