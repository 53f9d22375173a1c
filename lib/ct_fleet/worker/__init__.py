"""The worker side: what runs on each instance after bootstrap.

- loop: receive, keep hidden, run, upload, report, exit when idle or told to stop
- reporter: done reports and deletes, batched per interval
- concurrency: jobs at once, adapted to rate-limit pressure
- runner: one job as an Inspect eval, in its own process (warm, forkserver: in a fork)
- inspect_job: what a job runs (its task on this worker, arguments, sample, sandbox)
- failures: a failed job's own error text (secrets masked) and whether a retry can help

It imports the protocol, the AWS service wrappers and evallog, never the controller or
the CLI (tests/test_layout.py checks).
"""
