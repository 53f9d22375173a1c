"""Set up or check a bats test's moto state with many AWS calls in one process.

    python tests/bats/boto.py CODE [ARG...]       (helpers.bash: awspy CODE [ARG...])

CODE is Python run with `aws(service)`, a boto3 client for $MOTO_URL in $TEST_REGION;
`args`, the ARGs; `out(value)`, which prints a string as it is and anything else as JSON;
and `same_json(a, b)`, whether two JSON documents (text or parsed) are the same. A failed
`assert` fails the call with its traceback, and so the test.

Why not the AWS CLI here too: each CLI call costs half a second of CPU, which the setup and
checks of the admin tests paid 20 times over. The scripts under test still use the CLI.
"""

from __future__ import annotations

import json
import os
import sys
from functools import cache
from typing import Any

import boto3


@cache
def aws(service: str) -> Any:
    return boto3.client(service, endpoint_url=os.environ["MOTO_URL"], region_name=os.environ["TEST_REGION"])


def out(value: Any) -> None:
    print(value if isinstance(value, str) else json.dumps(value))


def same_json(a: Any, b: Any) -> bool:
    return (json.loads(a) if isinstance(a, str) else a) == (json.loads(b) if isinstance(b, str) else b)


if __name__ == "__main__":
    code, args = sys.argv[1], sys.argv[2:]
    exec(compile(code, "<awspy>", "exec"), {"aws": aws, "out": out, "same_json": same_json, "args": args})
