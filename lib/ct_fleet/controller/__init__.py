"""The controller side: from a command to a merged run, on this machine.

- run: the entry point (plan_fleet validates and decides, execute runs, run_fleet both)
- plan, preflight, config, runconfig, code, credentials, cost: deciding the fleet
- tasks (+ probe): plain Inspect tasks, located in what ships and loaded once
- setting_plan: setting runs (-e setting:env, task files, policies, requirements)
- models: the model's provider, SDK and keys; usage: tokens and model cost
- shipped: the code archive and --extra-src trees, unpacked for preflight
- spec: what a fleet is and what a run returns
- tracker: job state from done reports (pure); scaling: when to launch (pure)
- loop: the run loop around them (queues, results, workers, teardown)
- fleet_merge: a fleet's per-job logs -> one merged log per task
- observe: looking at fleets from any machine
"""
