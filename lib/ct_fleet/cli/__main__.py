"""python -m ct_fleet.cli: what bin/ct-fleet runs."""

from ..exits import run_as_main
from .main import main

# The CLI ends as python would, less the run-down of inspect_ai's modules (~0.5 s that a
# user, or a script, waits out after the run is over).
run_as_main(main)
