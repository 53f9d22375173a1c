"""The worker side: what runs on each instance after bootstrap.

- loop: receive, run, upload, report, exit when idle or told to stop (settings: its
  settings; slots: the jobs it runs; attempt: one attempt of a job; duties: visibility,
  heartbeats, the end-of-run marker, instance notices, run by one keeper)
- budget: its share of the fleet's model budget, as tokens to its jobs' requests
- reporter: done reports and deletes, batched per interval
- concurrency: jobs at once, adapted to rate-limit pressure
- runner: one job as an Inspect eval, in its own process (warm, forkserver, forked_job: in a fork)
- inspect_job: what a job runs (its task on this worker, arguments, sample, sandbox)
- failures: a failed job's own error text (secrets masked) and whether a retry can help

It imports the protocol, the AWS service wrappers and evallog, never the controller or
the CLI (tests/repo/test_layout.py checks).
"""
