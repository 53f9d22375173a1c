"""--max-connections on a local fleet: one budget for the whole fleet (docs/model-budget.md).

A loopback OpenAI-compatible server answers at most L requests at once, each after a fixed
latency, and refuses any beyond with HTTP 429 (tests/testkit/openai_stub.py --max-concurrent). Four
local workers of four slots run a three-turn task with --max-connections L (13: shares of
4, 3, 3, 3, so one worker's share is under its slots): without a fleet-wide budget they
would send up to 16 requests at once, each job up to 13. The server must see almost no
429s; a worker killed mid-run (its whole process tree, as an instance dies) must have its
share given to the others, and the pool adds no worker while the budget is all granted.
(Workers of eight slots, as the issue has them, would be two: a fleet whose every model
has a budget launches no more workers than hold it.)
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psutil
import pytest

from testkit.fleet import env_for, fleet_dir, kill, launch, processes_in, wait_for

KEY = "sk-stub-" + uuid.uuid4().hex
L = 13
SAMPLES = 40

TASK = """
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, user_message


@task
def turns(n: int = 8):
    samples = [Sample(id=i, input=f"What is {i} times 7?", target=str(i * 7)) for i in range(1, n + 1)]
    again = user_message("What is 2 times 3?")
    return Task(dataset=MemoryDataset(samples), solver=[generate(), again, generate(), again, generate()], scorer=includes())
"""


def _entries(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    from testkit.fleet import model_stub

    where = tmp_path_factory.mktemp("budget")
    with model_stub(where, KEY, "--rate-limit-every", "0", "--max-concurrent", str(L), "--latency", "0.3") as stub:
        (where / "turns.py").write_text(TASK)
        runs = where / "runs"
        runs.mkdir()
        (runs / ".env").write_text(f"STUBAI_API_KEY={KEY}\nSTUBAI_BASE_URL={stub['base_url']}\n")
        args = [
            "eval",
            "turns.py@turns",
            "-T",
            f"n={SAMPLES}",
            "--model",
            "openai-api/stubai/scripted",
            "--max-connections",
            str(L),
            "--json",
            *("--ec2-arg", "max_workers=4", "--ec2-arg", "concurrency_per_worker=4"),
            *("--ec2-arg", "check_interval=2", "--ec2-arg", "visibility_timeout=12"),
            *("--ec2-arg", "heartbeat_interval=3", "--ec2-arg", "idle_timeout=20"),
            *("--ec2-arg", "retry_backoff=1"),
        ]
        proc = launch(args, env=env_for(runs), cwd=where)
        log = Path(str(stub["log"]))
        # Once a fifth of the requests are answered, one worker dies with its jobs.
        wait_for(lambda: len([e for e in _entries(log) if e["status"] == 200]) >= SAMPLES * 3 // 5, timeout=300)
        workers = processes_in(runs, "ct_fleet.worker")
        assert len(workers) == 4, "four workers should be up"
        victim = workers[0]
        tree = [*victim.children(recursive=True), victim]
        for p in tree:
            kill(p)
        psutil.wait_procs(tree, timeout=30)
        out, err = proc.communicate(timeout=600)
        yield {"code": proc.returncode, "out": out, "err": err, "log": log, "runs": runs}


def test_the_run_completes(fleet):
    assert fleet["code"] == 0, fleet["err"][-3000:]
    assert json.loads(fleet["out"])["outcome"] == "success"


def test_the_server_sees_at_most_l_at_once_and_almost_no_429s(fleet):
    entries = _entries(fleet["log"])
    answered = [e for e in entries if e["status"] == 200]
    refused = [e for e in entries if e["status"] == 429]
    assert len(answered) >= SAMPLES * 3
    assert max(e["active"] for e in answered) <= L
    # Only requests of the killed worker's jobs, still in the server when it died, can
    # overlap its share's next holder.
    assert len(refused) <= 0.01 * len(entries) + 1, f"{len(refused)} of {len(entries)} refused"


def test_a_dead_workers_share_goes_to_the_others(fleet):
    divisions = [json.loads(line) for line in (fleet_dir(fleet["runs"]) / "budget.jsonl").read_text().splitlines()]
    shares = [d["models"]["openai-api/stubai/scripted"]["shares"] for d in divisions]
    assert any(sorted(s.values()) == [3, 3, 3, 4] for s in shares), shares
    after = [s for s in shares if len(s) == 3]
    assert after, f"no division among the three left: {shares}"
    assert sorted(after[0].values()) == [4, 4, 4]  # each of the others' grows, up to its slots
    for s in shares:
        assert sum(s.values()) <= L
    launched = [json.loads(line) for line in (fleet_dir(fleet["runs"]) / "workers.jsonl").read_text().splitlines()]
    assert not [w for w in launched if w.get("why") == "scale_up"], "scaled up while the budget was all granted"
