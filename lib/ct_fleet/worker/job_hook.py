"""Inspect's hooks in a job process: the model budget's tokens (worker/budget.py), the
rate-limit retries the job made (pressure.py), the usage no result may carry (spent.py),
and a resumed sample's earlier attempts' time (what its checkpoint restored: the log
holds only the last attempt's).

With a budget, the worker serves tokens on a Unix socket whose path its work directory
names (budget.SOCKET, a link to a short path: socket paths are limited to ~100 bytes).
The job runs with max_connections 1, so it holds at most one token: taken before each
request (`on_before_model_generate`, which fires on every attempt), given back when the
request ends (`on_model_usage`, `on_model_retry` before the backoff) or the sample does.
A rate-limit retry is said to the worker at once (`limited MODEL`, on a second connection
of its own, so that it never waits behind a request waiting for a token), the provider
SDK's own retries included; without a budget it is counted into `<output>.ratelimited` for
the done report.
A request that ends without either (no usage reported, a cache hit) keeps its token until
the job's next request or its sample's end: never more requests than tokens.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import anyio
from inspect_ai.hooks import BeforeModelGenerate, Hooks, ModelRetry, ModelUsageData, SampleEnd, SampleEvent, hooks

from . import spent
from .budget import SOCKET
from .pressure import sidecar


def _connect(path: str) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    return conn


def _say(conn: socket.socket, line: str) -> None:
    conn.sendall(f"{line}\n".encode())
    answer = b""
    while not answer.endswith(b"\n"):
        part = conn.recv(64)
        if not part:
            raise ConnectionError("the worker's budget server went away")
        answer += part


class _Tokens:
    def __init__(self) -> None:
        self.conn: socket.socket | None = None  # tokens, from a thread off the event loop
        self.signals: socket.socket | None = None  # rate limits, from the event loop's thread
        self.held: str | None = None  # the model this job holds a token of
        self.rate_limited = 0

    def open(self, out: Path) -> None:
        self.close()
        self.rate_limited = 0
        link = out.parent / SOCKET
        if not link.is_symlink():
            return  # the fleet has no budget
        self.conn = _connect(os.readlink(link))
        self.signals = _connect(os.readlink(link))

    def close(self) -> None:
        for conn in (self.conn, self.signals):
            if conn is not None:
                conn.close()
        self.conn, self.signals, self.held = None, None, None

    def _say(self, line: str) -> None:
        assert self.conn is not None
        _say(self.conn, line)

    async def acquire(self, model: str) -> None:
        if self.conn is None or self.held == model:
            return
        await self.release()
        await anyio.to_thread.run_sync(self._say, f"acquire {model}")
        self.held = model

    def limited(self, model: str | None) -> None:
        """A rate-limit retry: told to the worker at once (it cuts its own share, and the
        adaptive total follows), else counted for the done report. A short blocking
        exchange: the worker answers at once."""
        model = model or self.held
        if self.signals is None or model is None:
            self.rate_limited += 1
        else:
            _say(self.signals, f"limited {model}")

    async def release(self) -> None:
        if self.conn is None or self.held is None:
            return
        model, self.held = self.held, None
        await anyio.to_thread.run_sync(self._say, f"release {model}")


TOKENS = _Tokens()

# The sample's earlier attempts' (wall, working) seconds, when it resumed from a checkpoint.
_prior_time: tuple[float, float] | None = None


class _Spent:
    """The usage of the calls made since the sample's last committed checkpoint (all of
    them without checkpoints), kept beside the job's output after each call (spent.py)."""

    def __init__(self) -> None:
        self.out: Path | None = None
        self.usage: dict[str, dict[str, int | float]] = {}

    def start(self, out: Path) -> None:
        self.out, self.usage = out, {}
        spent.write(out, {})

    def add(self, model: str, usage: dict[str, int | float | None]) -> None:
        into = self.usage.setdefault(model, {})
        for key, value in usage.items():
            if isinstance(value, int | float):
                into[key] = into.get(key, 0) + value
        if self.out is not None:
            spent.write(self.out, self.usage)

    def checkpointed(self) -> None:
        self.usage = {}
        if self.out is not None:
            spent.write(self.out, {})


SPENT = _Spent()


class _SdkRetries(logging.Handler):
    """Retries inside a provider's own client fire no Inspect hook: the OpenAI and
    Anthropic SDKs retry a 429 (or a 408, 409, 5xx) themselves, saying so in their
    `_base_client` log ("Retrying request to ..."), in the event loop's thread while the
    job holds its token: said to the worker at once."""

    LOGGERS = ("openai._base_client", "anthropic._base_client")

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.said = 0  # during the request in progress

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Retrying request"):
            self.said += 1
            try:
                TOKENS.limited(None)
            except OSError:
                self.handleError(record)

    def install(self) -> None:
        for name in self.LOGGERS:
            logger = logging.getLogger(name)
            if self not in logger.handlers:
                logger.addHandler(self)
                if logger.getEffectiveLevel() > logging.INFO:
                    logger.setLevel(logging.INFO)


_SDK_RETRIES = _SdkRetries()


def _rate_limited(data: ModelRetry) -> bool:
    return data.status_code == 429 or "ratelimit" in (data.exception_type or "").lower()


@hooks(name="ct_fleet_job", description="a fleet job's model budget tokens and rate-limit count")
class JobHooks(Hooks):
    async def on_before_model_generate(self, data: BeforeModelGenerate) -> None:
        _SDK_RETRIES.said = 0
        await TOKENS.acquire(data.model_name)

    async def on_model_usage(self, data: ModelUsageData) -> None:
        SPENT.add(data.model_name, data.usage.model_dump())
        # `retries`: the HTTP retries Inspect saw its provider's client make, those the
        # SDK's log said included (other providers' clients log none)
        for _ in range(data.retries - _SDK_RETRIES.said):
            TOKENS.limited(data.model_name)
        await TOKENS.release()

    async def on_model_retry(self, data: ModelRetry) -> None:
        if _rate_limited(data):
            TOKENS.limited(data.model_name)
        await TOKENS.release()

    async def on_sample_event(self, data: SampleEvent) -> None:
        if data.event.event == "checkpoint":  # committed: a resume restores what came before
            SPENT.checkpointed()

    async def on_sample_end(self, data: SampleEnd) -> None:
        global _prior_time
        from ..inspect_private import sample_prior_time

        await TOKENS.release()
        _prior_time = sample_prior_time()  # the sample's own clock: this runs in its context


def start(out: Path) -> None:
    """A job begins: its tokens' connection (a forked job inherits its server's state)."""
    global _prior_time
    _prior_time = None
    _SDK_RETRIES.install()
    TOKENS.open(out)
    SPENT.start(out)


def finish(out: Path) -> None:
    if TOKENS.rate_limited:
        sidecar(out).write_text(str(TOKENS.rate_limited))
    TOKENS.close()


def prior_time() -> tuple[float, float] | None:
    """The job's sample's earlier attempts' (wall, working) seconds, restored from the
    checkpoint it resumed from; None when it did not resume."""
    return _prior_time
