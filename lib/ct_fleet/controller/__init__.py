"""The controller side: from a command to a merged run, on this machine.

- run: the entry point (plan_fleet validates and decides, execute runs, run_fleet both)
- plan, preflight, config, runconfig, code, credentials, cost: deciding the fleet
- spec: what a fleet is and what a run returns
- tracker: job state from done reports (pure); scaling: when to launch (pure)
- loop: the run loop around them (queues, results, workers, teardown)
- observe: looking at fleets from any machine
"""
