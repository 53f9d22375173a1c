"""The worker side: what runs on each instance after bootstrap.

- loop: receive, keep hidden, run, upload, report, exit when idle or told to stop
- reporter: done reports and deletes, batched per interval
- concurrency: jobs at once, adapted to rate-limit pressure
- runner: one job as an Inspect eval, in its own process

It imports the protocol, the AWS service wrappers and evallog, never the controller or
the CLI (tests/test_layout.py checks).
"""
