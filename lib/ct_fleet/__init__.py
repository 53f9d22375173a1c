"""ct-fleet: run Inspect AI evaluations on a fleet of EC2 workers or an embedded local cloud."""

__version__ = "0.1.0"
