"""python -m ct_fleet.worker: the job loop, started by worker/run-worker.sh."""

from __future__ import annotations

import logging
import sys

from .loop import Worker, WorkerSettings


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    return Worker(WorkerSettings.from_env()).run()


if __name__ == "__main__":
    sys.exit(main())
