"""A scripted OpenAI-compatible HTTP server on loopback, for tests and config dry-runs.

It answers `POST /v1/chat/completions` from a script: fixed replies (in turn), a reply function, or
echo (the last user message). It can add latency and inject faults: HTTP 500, 429 with Retry-After,
401, hangs past the client's timeout, malformed JSON bodies and empty content. Faults come either in
a fixed sequence (deterministic tests) or at random rates with a seed (soak tests).

    python -m utu.llm.stub --port 8765 --echo --latency 0.02 --fault http500=0.1 --fault http429=0.05
"""

import argparse
import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = ("http500", "http429", "http401", "http400", "hang", "malformed", "empty")

Reply = str | dict[str, Any]  # a text, or an assistant message dict (e.g. with "tool_calls")


@dataclass
class StubScript:
    replies: list[Reply] = field(default_factory=list)  # used in turn, the last one repeats
    reply_fn: Callable[[dict[str, Any]], Reply] | None = None  # request body -> reply
    latency: float = 0.0
    fault_sequence: list[str | None] = field(default_factory=list)  # one entry per request, then none
    fault_rates: dict[str, float] = field(default_factory=dict)
    fault_fn: Callable[[dict[str, Any]], str | None] | None = None  # request body -> fault (or None)
    retry_after: float = 1.0
    hang_seconds: float = 60.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in [*self.fault_sequence, *self.fault_rates]:
            if name is not None and name not in FAULTS:
                raise ValueError(f"unknown fault {name!r}; choose from {', '.join(FAULTS)}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default (5) resets connections under a burst of concurrent clients


class StubServer:
    """Run with `with StubServer(script) as stub:`; `stub.base_url` ends in /v1."""

    def __init__(self, script: StubScript | None = None, host: str = "127.0.0.1", port: int = 0):
        self.script = script or StubScript()
        self.requests: list[dict[str, Any]] = []  # every chat request body received, in order
        self.faults_served: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most chat requests being handled at once
        self._lock = threading.Lock()
        self._reply_index = 0
        self._rng = random.Random(self.script.seed)
        self._httpd = _Server((host, port), _make_handler(self))
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "StubServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "StubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def request_count(self) -> int:
        return len(self.requests)

    def _pick_fault(self, n: int, body: dict[str, Any]) -> str | None:
        script = self.script
        if script.fault_fn is not None:
            return script.fault_fn(body)
        if n < len(script.fault_sequence):
            return script.fault_sequence[n]
        roll = self._rng.random()
        for name, rate in script.fault_rates.items():
            if roll < rate:
                return name
            roll -= rate
        return None

    def _next(self, body: dict[str, Any]) -> tuple[str | None, Reply]:
        """Pick this request's fault (if any) and reply, atomically."""
        with self._lock:
            n = len(self.requests)
            self.requests.append(body)
            fault = self._pick_fault(n, body)
            if fault:
                self.faults_served.append(fault)
                return fault, ""
            if self.script.reply_fn is not None:
                return None, self.script.reply_fn(body)
            if self.script.replies:
                reply = self.script.replies[min(self._reply_index, len(self.script.replies) - 1)]
                self._reply_index += 1
                return None, reply
            return None, _last_user_text(body)


def _make_handler(server: StubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/health"):
                self._json(200, {"object": "list", "data": [{"id": "stub-model", "object": "model"}]})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                self._json(400, {"error": {"message": "request body is not JSON"}})
                return
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            with server._lock:
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
            try:
                self._answer(body)
            finally:
                with server._lock:
                    server.in_flight -= 1

        def _answer(self, body: dict[str, Any]) -> None:
            script = server.script
            if script.latency:
                time.sleep(script.latency)
            fault, reply = server._next(body)
            if fault == "http500":
                self._json(500, {"error": {"message": "injected server error"}})
            elif fault == "http429":
                self._json(
                    429,
                    {"error": {"message": "injected rate limit"}},
                    {"Retry-After": str(script.retry_after)},
                )
            elif fault == "http401":  # like real APIs, quote the key back (tests check that we never leak it)
                key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                self._json(401, {"error": {"message": f"injected: invalid API key {key}"}})
            elif fault == "http400":
                self._json(400, {"error": {"message": "injected: bad request"}})
            elif fault == "hang":
                time.sleep(script.hang_seconds)
                self.close_connection = True
            elif fault == "malformed":
                self._raw(200, b'{"id": "x", "choices": [ this is not json')
            else:
                message = {"role": "assistant", "content": ""} if fault == "empty" else _as_message(reply)
                self._json(200, _completion(body, message))

        def _json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
            self._raw(status, json.dumps(payload).encode(), headers)

        def _raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (e.g. its timeout fired during a hang)

    return Handler


def _last_user_text(body: dict[str, Any]) -> str:
    for m in reversed(body.get("messages", [])):
        if m.get("role") == "user":
            return m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
    return ""


def _as_message(reply: Reply) -> dict[str, Any]:
    if isinstance(reply, str):
        return {"role": "assistant", "content": reply}
    return {"role": "assistant", "content": None, **reply}


def count_tokens(text: str) -> int:
    """The stub's deterministic token count: whitespace-separated words."""
    return len(text.split())


def _completion(body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    prompt = sum(
        count_tokens(m.get("content") or "") for m in body.get("messages", []) if isinstance(m.get("content"), str)
    )
    completion = count_tokens(message.get("content") or "") + count_tokens(json.dumps(message.get("tool_calls", "")))
    if "tool_calls" not in message:
        completion = count_tokens(message.get("content") or "")
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "stub-model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def _load_function(spec: str) -> Callable[[dict[str, Any]], Reply]:
    import importlib.util

    path, _, name = spec.rpartition(":")
    module_spec = importlib.util.spec_from_file_location("stub_reply_module", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m utu.llm.stub", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--reply", action="append", default=[], help="a fixed reply (repeat for a sequence)")
    parser.add_argument("--echo", action="store_true", help="reply with the last user message (the default)")
    parser.add_argument("--reply-fn", metavar="FILE.py:FUNC", help="a Python function (request body -> reply)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to each request")
    parser.add_argument(
        "--fault", action="append", default=[], metavar="KIND=RATE", help=f"KIND in {', '.join(FAULTS)}"
    )
    parser.add_argument("--retry-after", type=float, default=1.0)
    parser.add_argument("--hang-seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rates = {}
    for item in args.fault:
        kind, _, rate = item.partition("=")
        try:
            rates[kind] = float(rate)
        except ValueError:
            parser.error(f"--fault {item!r}: expected KIND=RATE, e.g. http500=0.1")
    reply_fn = _load_function(args.reply_fn) if args.reply_fn else None
    try:
        script = StubScript(
            reply_fn=reply_fn,
            replies=args.reply,
            latency=args.latency,
            fault_rates=rates,
            retry_after=args.retry_after,
            hang_seconds=args.hang_seconds,
            seed=args.seed,
        )
    except ValueError as e:
        parser.error(str(e))
    server = StubServer(script, args.host, args.port)
    print(f"stub LLM listening on {server.base_url}", flush=True)
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
