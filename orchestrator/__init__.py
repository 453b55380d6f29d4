"""compilebench's driver side: specs, sweeps, Ray scheduling, reports, the CLI."""
