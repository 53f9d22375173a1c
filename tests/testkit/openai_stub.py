"""A loopback OpenAI-compatible chat completions server with a scripted agent.

    STUB_API_KEY=KEY python tests/testkit/openai_stub.py --port-file F --log F [--rate-limit-every N]
        [--max-concurrent L --latency S]

POST /v1/chat/completions (Authorization: Bearer KEY, else 401; the key comes in the
environment so that it is on no command line): offered no tools, the "model" answers
"What is A times B?" with the product; offered tools, while the conversation has no tool
result yet, it calls the `bash` tool to compute the answer, and after it answers with the
tool's output. The log records the generate config each request sent. Usage counts are real (from the request and reply
sizes). Every Nth request is refused with HTTP 429 first, so clients must retry. One JSON
line per request goes to --log (status, model, whether the key matched), never the key.

With --max-concurrent L it is a provider with a concurrency limit: it answers at most L
requests at once, each after --latency seconds, and refuses any beyond with HTTP 429 at
once; each log line then also has `active`, the requests in progress when it arrived
(itself included, so at most L for a 200), and `t0`/`t1`, when it arrived and was answered.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class Stub:
    def __init__(
        self, key: str, log: Path, rate_limit_every: int, max_concurrent: int = 0, latency: float = 0.0
    ) -> None:
        self.key = key
        self.log = log
        self.every = rate_limit_every
        self.max_concurrent = max_concurrent
        self.latency = latency
        self.active = 0
        self.count = 0
        self.lock = threading.Lock()

    def enter(self) -> int | None:
        """A request begins: the requests now in progress, or None when over the limit."""
        with self.lock:
            if self.max_concurrent and self.active >= self.max_concurrent:
                return None
            self.active += 1
            return self.active

    def leave(self) -> None:
        with self.lock:
            self.active -= 1

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock, open(self.log, "a") as fh:
            fh.write(json.dumps(entry) + "\n")

    def next_number(self) -> int:
        with self.lock:
            self.count += 1
            return self.count


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _bash_parameter(request: dict[str, Any]) -> str:
    """The bash tool's command parameter, as the client declared it."""
    for tool in request.get("tools") or []:
        function = tool.get("function") or {}
        if function.get("name") == "bash":
            params = function.get("parameters") or {}
            return str((params.get("required") or list(params.get("properties") or {}) or ["cmd"])[0])
    return "cmd"


# "Take N steps of S seconds": a long agent (react(), tests/fleet/test_checkpoints.py): N-1 bash
# calls that each append a line to steps.txt in the sandbox and sleep S seconds, one that
# reads the file back, then `submit` with what it read: N+1 model calls in all.
STEPS = re.compile(r"Take (\d+) steps of ([0-9.]+) seconds")


def _call(messages: list[Any], name: str, arguments: str) -> dict[str, Any]:
    call = {"id": f"call_{len(messages)}", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _steps_reply(request: dict[str, Any], steps: re.Match[str]) -> tuple[dict[str, Any], str]:
    messages = request.get("messages") or []
    tool_results = [m for m in messages if m.get("role") == "tool"]
    n, pause, done = int(steps.group(1)), steps.group(2), len(tool_results)
    param = _bash_parameter(request)
    if done < n - 1:
        command = f"echo step {done + 1} >> steps.txt && sleep {pause}"
        return _call(messages, "bash", json.dumps({param: command})), command
    if done == n - 1:
        return _call(messages, "bash", json.dumps({param: "cat steps.txt"})), "cat steps.txt"
    output = tool_results[-1].get("content")
    output = output if isinstance(output, str) else json.dumps(output)
    return _call(messages, "submit", json.dumps({"answer": output.strip()})), output


def reply(request: dict[str, Any]) -> dict[str, Any]:
    messages = request.get("messages") or []
    prompt = json.dumps(messages)
    tool_results = [m for m in messages if m.get("role") == "tool"]
    first = next((m.get("content") for m in messages if m.get("role") == "user"), "")
    steps = STEPS.search(first if isinstance(first, str) else json.dumps(first))
    if steps and request.get("tools"):
        message, completion = _steps_reply(request, steps)
        finish = "tool_calls"
    elif not request.get("tools"):
        # No tools to call: the "model" answers at once ("What is A times B?" -> A*B).
        question = next((m.get("content") for m in messages if m.get("role") == "user"), "")
        text = question if isinstance(question, str) else json.dumps(question)
        numbers = [int(w) for w in text.replace("?", " ").split() if w.isdigit()]
        a, b = (numbers + [0, 0])[:2]
        message = {"role": "assistant", "content": str(a * b)}
        finish = "stop"
        completion = message["content"]
    elif not tool_results:
        question = next((m.get("content") for m in messages if m.get("role") == "user"), "")
        text = question if isinstance(question, str) else json.dumps(question)
        # "What is A times B?" -> the agent asks bash to compute it.
        numbers = [int(w) for w in text.replace("?", " ").split() if w.isdigit()]
        a, b = (numbers + [0, 0])[:2]
        arguments = json.dumps({_bash_parameter(request): f"echo $(({a} * {b}))"})
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{len(messages)}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": arguments},
                }
            ],
        }
        finish = "tool_calls"
        completion = arguments
    else:
        output = tool_results[-1].get("content")
        output = output if isinstance(output, str) else json.dumps(output)
        message = {"role": "assistant", "content": f"The answer is {output.strip()}."}
        finish = "stop"
        completion = message["content"]
    prompt_tokens, completion_tokens = _tokens(prompt), _tokens(completion)
    return {
        "id": f"chatcmpl-{time.time_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "scripted"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def make_handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length) or b"{}")
            number = stub.next_number()
            key_ok = self.headers.get("Authorization") == f"Bearer {stub.key}"
            entry = {"n": number, "path": self.path, "model": request.get("model"), "key_ok": key_ok}
            # the generate config the client sent (what --temperature, --seed, ... must reach)
            entry["sent"] = {k: request[k] for k in ("temperature", "seed", "max_tokens", "top_p") if k in request}
            if not key_ok:
                stub.record({**entry, "status": 401})
                self._send(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
                return
            if not self.path.endswith("/chat/completions"):
                stub.record({**entry, "status": 404})
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            if stub.every and number % stub.every == 0:
                stub.record({**entry, "status": 429})
                self._send(
                    429,
                    {"error": {"message": "Rate limit reached, slow down", "type": "rate_limit_error"}},
                    {"Retry-After": "0"},
                )
                return
            t0 = time.time()
            active = stub.enter()
            if active is None:
                stub.record({**entry, "status": 429, "t0": t0, "active": stub.max_concurrent + 1})
                self._send(
                    429,
                    {"error": {"message": "Too many concurrent requests", "type": "rate_limit_error"}},
                    {"Retry-After": "1"},
                )
                return
            try:
                time.sleep(stub.latency)
                body = reply(request)
            finally:
                stub.leave()
            stub.record({**entry, "status": 200, "usage": body["usage"], "active": active, "t0": t0, "t1": time.time()})
            self._send(200, body)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--rate-limit-every", type=int, default=3)
    parser.add_argument("--max-concurrent", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    stub = Stub(os.environ["STUB_API_KEY"], args.log, args.rate_limit_every, args.max_concurrent, args.latency)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(stub))
    args.port_file.write_text(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
