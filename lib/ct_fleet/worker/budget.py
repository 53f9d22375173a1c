"""The worker's side of the fleet's model budget (protocol/budget.py): its share of each
model, read from S3, and the requests to each model its jobs have in flight, never over
the share, across all its job processes.

Every job process runs Inspect with max_connections 1 (one request at a time) and asks
this worker for a token before each request (Inspect's own hooks, job_hook.py): the
worker serves tokens on a Unix socket in its work directory (TokenServer, SOCKET), one
connection per job. A request whose model has no free token waits until one frees or the
share grows; a job gives its token back when the request ends (usage or a retry), when
its sample ends, or when its process does (the connection closes).
"""

from __future__ import annotations

import logging
import shutil
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..protocol.budget import BUDGET_POLL, Budget
from ..services import budget as budget_store

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger("ct_fleet.worker")

SOCKET = "budget.sock"  # in the worker's work directory, beside its jobs' outputs
# How long a worker's own cut after a rate limit lasts if no new division comes first: the
# controller cuts the total within a check of hearing of it, at most once per cooldown.
OWN_CUT_HOLD = 15.0


class WorkerBudget:
    def __init__(self, doc: Budget, instance_id: str) -> None:
        self.doc = doc
        self.instance_id = instance_id
        # Per budget key: a model's own, or the provider's its models share (Budget.pools).
        self.held: Counter[str] = Counter()  # requests in flight
        self.waiting: Counter[str] = Counter()  # requests waiting for a token
        self.limited: Counter[str] = Counter()  # rate-limit retries since the worker started
        self.own_cut_until: dict[str, float] = {}  # when this worker's own cut ends
        self.changed = threading.Condition()
        self.news = threading.Event()  # a rate limit to tell the controller now, not at the next poll

    @classmethod
    def load(cls, s3: S3Client, bucket: str, fleet_id: str, instance_id: str) -> "WorkerBudget | None":
        """The fleet's budget at this worker's start; None when the fleet has none."""
        doc = budget_store.get(s3, bucket, fleet_id)
        if doc is None or doc == budget_store.NONE:
            return None
        return cls(doc, instance_id)

    def applies(self, model: str) -> bool:
        return self.doc.key(model) in self.doc.models

    def share(self, model: str) -> int:
        return self.doc.share(model, self.instance_id) or 0

    def allowed(self, model: str) -> int:
        """The share, less one request while this worker's own cut lasts."""
        share = self.share(model)
        if self.own_cut_until.get(self.doc.key(model), 0.0) > time.monotonic():
            return max(0, share - 1)
        return share

    def on_limited(self, model: str) -> None:
        """A job's request met a rate limit. With an adaptive total the provider is at its
        limit now: this worker takes one request off its share at once (the fleet's cut
        comes seconds later, through the controller), and says so at once."""
        with self.changed:
            key = self.doc.key(model)
            self.limited[key] += 1
            budget = self.doc.models.get(key)
            if budget is not None and budget.adaptive:
                self.own_cut_until[key] = time.monotonic() + OWN_CUT_HOLD
        self.news.set()

    def any_share(self) -> bool:
        """A share of some model: a worker with none takes no jobs (they would only wait)."""
        with self.changed:
            return any(self.share(m) for m in self.doc.models)

    def set(self, doc: Budget) -> bool:
        """A document read from S3; True when it is a new one."""
        with self.changed:
            if doc.v == self.doc.v:
                return False
            self.doc = doc
            self.own_cut_until.clear()  # the controller's division supersedes it
            self.changed.notify_all()
            return True

    def acquire(self, model: str, cancel: threading.Event) -> bool:
        """A token for a request to `model` (at once for a model with no budget); False
        when `cancel` is set first."""
        with self.changed:
            if not self.applies(model):
                return True
            key = self.doc.key(model)  # a provider's models share its budget's counts
            self.waiting[key] += 1
            try:
                while self.held[key] >= self.allowed(model):
                    if cancel.is_set():
                        return False
                    self.changed.wait(1.0)
            finally:
                self.waiting[key] -= 1
            self.held[key] += 1
            return True

    def release(self, model: str) -> None:
        with self.changed:
            if self.applies(model):
                self.held[self.doc.key(model)] -= 1
                self.changed.notify_all()

    def report(self) -> dict[str, Any]:
        """For the heartbeat: the version read and the requests held per budget key."""
        with self.changed:
            return {
                "v": self.doc.v,
                "held": {m: self.held[m] for m in self.doc.models},
                "waiting": {m: self.waiting[m] for m in self.doc.models},
                "limited": {m: self.limited[m] for m in self.doc.models},
            }

    def over(self) -> bool:
        """Holding more than a share (jobs started before a cut)."""
        with self.changed:
            return any(self.held[m] > self.share(m) for m in self.doc.models)


def follow(
    budget: WorkerBudget,
    read: Callable[[], Budget | None],
    tell: Callable[[], None],
    stopping: threading.Event,
) -> None:
    """Read the document every BUDGET_POLL seconds, and at once when a job met a rate limit;
    `tell` the controller (a heartbeat) what is held when a new one arrives, while over a
    share each time that changes, and when the jobs met rate limits (the adaptive total
    reacts within a check)."""
    last_said = budget.report()  # what the controller can take as known: the start
    was_over = False
    while not stopping.is_set():
        if budget.news.wait(BUDGET_POLL):
            budget.news.clear()
        if stopping.is_set():
            break
        try:
            doc = read()
        except Exception:
            log.exception("could not read the fleet's model budget")
            continue
        new = doc is not None and doc != budget_store.NONE and budget.set(doc)
        now, over = budget.report(), budget.over()
        limited = now["limited"] != last_said["limited"]
        if new or limited or ((over or was_over) and now != last_said):
            try:
                tell()
                last_said, was_over = now, over
            except Exception:
                log.exception("could not report the budget held")


class TokenServer:
    """The budget's tokens for this worker's job processes, on a Unix socket: a job sends
    `acquire MODEL` (answered `ok` once it holds a token) and `release MODEL` (answered
    `ok`), one line each; what a connection holds when it closes is given back."""

    def __init__(self, budget: WorkerBudget, work_dir: Path, stopping: threading.Event) -> None:
        self.budget = budget
        self.stopping = stopping
        # A socket's path is limited to ~100 bytes and a work directory's may be longer:
        # the socket is in a short private directory, linked from the work directory.
        self.dir = Path(tempfile.mkdtemp(prefix="ct-budget-"))
        self.path = self.dir / "s"
        self.link = work_dir / SOCKET
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(self.path))
        self.sock.listen(64)
        self.link.unlink(missing_ok=True)
        self.link.symlink_to(self.path)
        self.sock.settimeout(1.0)

    def serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._job, args=(conn,), daemon=True).start()
        self.close()

    def close(self) -> None:
        self.sock.close()
        self.link.unlink(missing_ok=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def _job(self, conn: socket.socket) -> None:
        held: Counter[str] = Counter()
        try:
            with conn, conn.makefile("rwb", buffering=0) as stream:
                for raw in stream:
                    verb, _, model = raw.decode(errors="replace").strip().partition(" ")
                    if verb == "acquire":
                        if not self.budget.acquire(model, self.stopping):
                            return
                        held[model] += 1
                    elif verb == "limited":
                        self.budget.on_limited(model)
                    elif verb == "release" and held[model] > 0:
                        self.budget.release(model)
                        held[model] -= 1
                    stream.write(b"ok\n")
        except OSError:
            pass
        finally:
            for model, n in held.items():
                for _ in range(n):
                    self.budget.release(model)


def start(
    s3: S3Client,
    bucket: str,
    fleet_id: str,
    instance_id: str,
    work_dir: Path,
    tell: Callable[[], None],
    stopping: threading.Event,
) -> WorkerBudget | None:
    """The fleet's model budget, if it has one: read now, then followed (`follow`) and served
    (`TokenServer`) in threads of their own until `stopping`."""
    try:
        budget = WorkerBudget.load(s3, bucket, fleet_id, instance_id)
    except Exception:
        log.exception("could not read the fleet's model budget; jobs run without one")
        return None
    if budget is None:
        return None
    tokens = TokenServer(budget, work_dir, stopping)
    threading.Thread(target=tokens.serve, name="budget-tokens", daemon=True).start()
    threading.Thread(
        target=follow,
        args=(budget, lambda: budget_store.get(s3, bucket, fleet_id), tell, stopping),
        name="budget-follow",
        daemon=True,
    ).start()
    return budget
