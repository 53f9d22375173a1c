"""python -m ct_fleet.cli: what bin/ct-fleet runs."""

from .main import main

main()
