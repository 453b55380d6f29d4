"""The sections of ``benchmarks/fidelity.py``, a module each, and what they share.

``fidelity.py`` is the entry point: it parses the command line and runs the sections asked for.
Each section module (``e2e``, ``inprocess``, ``drift``, ``heap``, ``timers``, ``interleaving``,
``stability``, ``neighbours``) holds one section's method and its printed table. What more than
one section needs lives below them, and no section imports another:

- ``workloads``: what is timed (the e2e experiments' workloads and spec, the in-process calls);
- ``reference``: the reference timer (``blocked_autorange``, in a process of its own or in this
  one) and the turn-taking that pairs two measurements seconds apart;
- ``tables``: the tables two sections print alike, the figures' format and the targets' verdict;
- ``cli_runs``: a spec run through the real command line.
"""
