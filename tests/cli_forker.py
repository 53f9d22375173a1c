"""Run `ct-fleet` command lines as processes forked from one that has the CLI's libraries
imported: each run is still its own process (its own exit status, environment, working
directory and output files), without paying boto3's and pydantic's imports every time.

    python tests/cli_forker.py      # then one JSON request per line on stdin:
    {"args": [...], "env": {...}, "cwd": DIR, "stdout": FILE, "stderr": FILE}  ->  {"code": N}

ct_fleet's CLI is imported here too: none of its modules reads the environment or the
terminal when it is imported (its consoles are made on first use), so each child still
runs with its own.
"""

from __future__ import annotations

import atexit
import json
import os
import sys

import boto3  # imported once here, inherited by every fork
import boto3.s3.transfer  # noqa: F401
import botocore.config  # noqa: F401
import click  # noqa: F401
import dotenv  # noqa: F401
import psutil  # noqa: F401
import pydantic  # noqa: F401
import rich.console
import rich.table  # noqa: F401
import yaml  # noqa: F401

from ct_fleet.cli.main import main as cli_main


def run(request: dict) -> int:
    pid = os.fork()
    if pid == 0:
        atexit._clear()  # the child's exit handlers are its own, as in a process of its own
        try:
            os.environ.clear()
            os.environ.update(request["env"])
            os.chdir(request["cwd"])
            fd_in = os.open(os.devnull, os.O_RDONLY)
            os.dup2(fd_in, 0)
            for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(out, fd)
            sys.argv = ["ct-fleet", *request["args"]]
            cli_main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # a crash of the CLI itself is the test's finding
            import traceback

            traceback.print_exc()
            code = 1
        # os._exit skips what an interpreter's exit runs (atexit: e.g. the planner's scratch
        # tree removal); run it here so that a leak in a real run shows up in tests too.
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            print(json.dumps({"code": run(json.loads(line))}), flush=True)


if __name__ == "__main__":
    main()
