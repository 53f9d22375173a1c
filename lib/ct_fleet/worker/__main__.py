"""python -m ct_fleet.worker: the job loop, started by worker/run-worker.sh."""

from __future__ import annotations

import logging
import os
import sys

from ..services import session
from .loop import Worker
from .settings import WorkerSettings


def main() -> int:
    """The worker's entry: the one place its environment is read (fleet.env's variables,
    the instance's, the clients' settings)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    environ = dict(os.environ)
    session.configure(session.ClientSettings.from_environ(environ))
    return Worker(WorkerSettings.from_env(environ)).run()


if __name__ == "__main__":
    sys.exit(main())
