"""Before anything runs: reading and validating a spec, expanding its sweep into experiments, the
spec's JSON Schema, and checking the places a run will write (the report, its page, the shared compile
cache). Nothing here talks to Ray or times anything."""
