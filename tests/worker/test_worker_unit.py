"""The worker's adaptive concurrency: additive increase, multiplicative decrease."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from ct_fleet.protocol import START_CONCURRENCY
from ct_fleet.worker.concurrency import Concurrency
from ct_fleet.worker.failures import RATE_LIMIT


def test_starts_at_ten_or_the_cap():
    assert Concurrency(20).current == START_CONCURRENCY == 10
    assert Concurrency(2).current == 2


def test_grows_by_one_per_window_of_successes_up_to_the_cap():
    c = Concurrency(12)
    for _ in range(10):
        c.success()
    assert c.current == 11
    for _ in range(100):
        c.success()
    assert c.current == 12


def test_halves_on_rate_limit_pressure_never_below_one():
    c = Concurrency(20)
    c.pressure()
    assert c.current == 5
    for _ in range(5):
        c.pressure()
    assert c.current == 1


def test_rate_limit_errors_are_recognised():
    for text in ("RateLimitError: 429 Too Many Requests", "anthropic: overloaded_error", "rate limit exceeded"):
        assert RATE_LIMIT.search(text)
    assert not RATE_LIMIT.search("KeyError: 'foo'")


def test_the_metadata_notices_come_from_the_loopback_endpoint_polled_every_5_s(tmp_path):
    from ct_fleet.cloud.metadata_server import MetadataServer
    from ct_fleet.worker.metadata import POLL, Metadata

    home = tmp_path / "i-0123456789abcdef0"
    home.mkdir()
    server = MetadataServer(tmp_path)
    now = [100.0]
    try:
        meta = Metadata(server.endpoint(home.name), clock=lambda: now[0])
        meta.poll()
        assert (meta.interrupted, meta.rebalance) == (False, False)
        (home / "rebalance-recommendation").touch()
        meta.poll()  # within POLL of the last look: not asked again
        assert not meta.rebalance
        now[0] += POLL
        meta.poll()
        assert (meta.interrupted, meta.rebalance) == (False, True)
        (home / "spot-interruption-notice").touch()
        (home / "rebalance-recommendation").unlink()
        now[0] += POLL
        meta.poll()
        assert (meta.interrupted, meta.rebalance) == (True, True)  # a notice once seen stays
        other = Metadata(server.endpoint("i-0fffffffffffffff0"), clock=lambda: now[0])
        other.poll()
        assert (other.interrupted, other.rebalance) == (False, False)  # another instance's files are its own
    finally:
        server.close()
    assert Metadata.for_instance(None, spot=False).endpoint is None  # on-demand on EC2: nothing to read
    assert Metadata.for_instance(None, spot=True).endpoint == "http://169.254.169.254"


def test_the_local_shutdown_shim_powers_off_through_its_runners_endpoint(tmp_path):
    """The embedded cloud's `shutdown`: a POST to the runner's endpoint, which terminates the
    instance (no AWS CLI started); an instance that is not the runner's gets a 404, on which
    the shim goes to the EC2 API itself (a controller that adopted the fleet has a new port)."""
    import os
    import subprocess
    import urllib.error
    import urllib.request

    from ct_fleet.cloud.local_instances import SHIMS_DIR
    from ct_fleet.cloud.metadata_server import MetadataServer

    ours, powered = "i-0123456789abcdef0", []
    server = MetadataServer(tmp_path, power_off=lambda instance: powered.append(instance) or instance == ours)
    try:
        env = {"PATH": os.environ["PATH"], "CT_IMDS_ENDPOINT": server.endpoint(ours), "INSTANCE_ID": ours}
        shim = subprocess.run(
            [str(SHIMS_DIR / "shutdown"), "-h", "now"], env=env, capture_output=True, text=True, timeout=60
        )
        assert shim.returncode == 0, shim.stderr
        assert shim.stdout.strip() == f"shutdown: powered off {ours}"
        assert powered == [ours]
        request = urllib.request.Request(f"{server.endpoint('i-0fffffffffffffff0')}/local/power-off", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 404
    finally:
        server.close()


def test_the_runners_endpoint_is_quiet_about_a_client_gone_before_its_answer(tmp_path, capsys):
    """The run's end kills what is left of its instances, a shim's curl among them: the
    runner's endpoint answering a client that is gone must not print socketserver's
    traceback into the controller's output; any other error of a request still does."""
    from ct_fleet.cloud.metadata_server import MetadataServer

    server = MetadataServer(tmp_path)
    try:
        for gone in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset"), TimeoutError()):
            try:
                raise gone
            except OSError:
                server._server.handle_error(None, ("127.0.0.1", 1))
        assert capsys.readouterr().err == ""
        try:
            raise ValueError("a bug")
        except ValueError:
            server._server.handle_error(None, ("127.0.0.1", 1))
        assert "ValueError: a bug" in capsys.readouterr().err
    finally:
        server.close()


def test_leave_runs_the_exit_handlers_and_flushes_but_skips_the_run_down():
    """ct_fleet.exits.leave: what a normal exit runs that matters, without the interpreter's
    orderly run-down (an object's finaliser is the sign of it)."""
    import subprocess
    import sys

    probe = (
        "import atexit, sys\n"
        "from ct_fleet.exits import leave\n"
        "atexit.register(lambda: print('handler ran'))\n"
        "class Finalised:\n"
        "    def __del__(self):\n"
        "        print('run down')\n"
        "kept = Finalised()\n"
        "sys.stdout.write('buffered ')\n"
        "leave(3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert proc.stdout.split() == ["buffered", "handler", "ran"]  # no "run down"


_MAIN_ENDS = {
    "return": ("pass", 0, ""),
    "exit 3": ("sys.exit(3)", 3, ""),
    "exit 300": ("sys.exit(300)", 300 & 0xFF, ""),
    "exit with a message": ("sys.exit('no such task')", 1, "no such task"),
    "a bug": ("raise ValueError('a bug')", 1, "ValueError: a bug"),
    "Ctrl-C": ("raise KeyboardInterrupt", -signal.SIGINT, "KeyboardInterrupt"),
}


@pytest.mark.parametrize("end", sorted(_MAIN_ENDS))
def test_the_cli_ends_as_python_would_less_the_run_down(end: str, tmp_path: Path):
    """ct_fleet.exits.run_as_main (what `python -m ct_fleet.cli` runs): python's exit status
    and message for each way a main can end, threads' work finished, a pool's queued work
    done, exit handlers run, output flushed; no finaliser of the run-down."""
    import subprocess
    import sys

    body, status, stderr = _MAIN_ENDS[end]
    done = tmp_path / "done"
    probe = (
        "import atexit, sys, threading, time\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from ct_fleet.exits import run_as_main\n"
        "atexit.register(lambda: print('handler ran'))\n"
        "class Finalised:\n"
        "    def __del__(self):\n"
        "        print('run down')\n"
        "kept = Finalised()\n"
        "def late(name):\n"
        "    time.sleep(0.3)\n"
        f"    open({str(done)!r} + name, 'w').close()\n"
        "pool = ThreadPoolExecutor(1)\n"
        "def main():\n"
        "    threading.Thread(target=late, args=('-thread',)).start()\n"
        "    pool.submit(late, '-pool')\n"
        "    sys.stdout.write('buffered ')\n"
        f"    {body}\n"
        "run_as_main(main)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == status, proc.stderr
    assert proc.stdout.split() == ["buffered", "handler", "ran"]  # no "run down"
    assert stderr in proc.stderr
    assert (stderr == "") == (proc.stderr == "")
    assert (tmp_path / "done-thread").exists() and (tmp_path / "done-pool").exists()
