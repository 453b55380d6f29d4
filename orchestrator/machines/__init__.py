"""What the driver knows of the cluster's machines, as plain data both the execution side and the
report share: a node and the environment of a run (``nodes``), and which calibrated devices are slow
for their model (``calibration``). No Ray, no torch, and nothing else of ``orchestrator``."""
