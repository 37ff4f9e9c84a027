"""A scripted OpenAI-compatible HTTP server on loopback, for tests and config dry-runs.

It answers `POST /v1/chat/completions` (and the Responses API, `POST /v1/responses`, and Azure OpenAI's
`/openai/deployments/<name>/chat/completions?api-version=...`) from a script: fixed replies (in turn), a
reply function, or echo (the last user message). Every request is recorded as a chat request body (a
Responses request translated, with `"api": "responses"`), so scripts are written once for both APIs.
It can add latency and inject faults: HTTP 500, 429 with Retry-After, 401, hangs past the client's
timeout, malformed JSON bodies and empty content. Faults come either in a fixed sequence (deterministic
tests) or at random rates with a seed (soak tests).

    python -m utu.llm.stub --port 8765 --echo --latency 0.02 --jitter 0.5 --fault http500=0.1 --fault http429=0.05
"""

import argparse
import asyncio
import hashlib
import json
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

FAULTS = ("http500", "http429", "http401", "http400", "hang", "malformed", "empty")

Reply = str | dict[str, Any]  # a text, or an assistant message dict (e.g. with "tool_calls")


@dataclass
class StubScript:
    replies: list[Reply] = field(default_factory=list)  # used in turn, the last one repeats
    reply_fn: Callable[[dict[str, Any]], Reply] | None = None  # request body -> reply
    latency: float = 0.0
    latency_jitter: float = 0.0  # sigma of a log-normal factor (median 1) on each request's latency: stragglers
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


class StubServer:
    """Run with `with StubServer(script) as stub:`; `stub.base_url` ends in /v1.

    An asyncio (aiohttp) server in a thread of its own: unlike a thread per connection, hundreds of
    concurrent requests sleeping out their latency cost no GIL hand-offs, so the stub is not what limits a
    benchmark.
    """

    def __init__(
        self, script: StubScript | None = None, host: str = "127.0.0.1", port: int = 0, timing_log: str | None = None
    ):
        self.script = script or StubScript()
        self.timing_log = open(timing_log, "a", buffering=1) if timing_log else None  # noqa: SIM115  (one line each)
        self.requests: list[dict[str, Any]] = []  # every chat request body received, in order
        self.faults_served: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most chat requests being handled at once
        self.embedding_requests = 0
        self._reply_index = 0
        self._rng = random.Random(self.script.seed)
        self._socket = socket.create_server((host, port), backlog=1024)  # bound now, so base_url is known
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._socket.getsockname()[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "StubServer":
        ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self.serve(ready),), daemon=True)
        self._thread.start()
        ready.wait()
        return self

    def stop(self) -> None:
        if self._loop and self._stopping:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread:
            self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> "StubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    async def serve(self, ready: threading.Event | None = None) -> None:
        """Serve until `stop()` (or forever, when run as the main program)."""
        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._chat)
        app.router.add_post("/openai/deployments/{deployment}/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._models)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await runner.setup()
        await web.SockSite(runner, self._socket).start()
        if ready:
            ready.set()
        try:
            await self._stopping.wait()
        finally:
            await runner.cleanup()

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
        """Pick this request's fault (if any) and reply (atomic: handlers share one event loop)."""
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

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stub-model", "object": "model"}]})

    async def _embeddings(self, request: web.Request) -> web.Response:
        """A hashed bag of words per input (STUB_EMBEDDING_SIZE floats, unit length): deterministic, and texts
        that share words are near, so a router's tests can learn from it."""
        try:
            texts = json.loads(await request.read() or b"{}")["input"]
        except (json.JSONDecodeError, KeyError, TypeError):
            return _error(400, "expected a JSON body with `input`")
        texts = [texts] if isinstance(texts, str) else texts
        self.embedding_requests += 1
        data = [{"object": "embedding", "index": i, "embedding": stub_embedding(t)} for i, t in enumerate(texts)]
        return web.json_response({"object": "list", "data": data, "model": "stub-embedding", "usage": {}})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.read() or b"{}")
        except json.JSONDecodeError:
            return _error(400, "request body is not JSON")
        if "deployment" in request.match_info:  # Azure: the model is the deployment; the version is required
            if not request.query.get("api-version"):
                return _error(400, "missing required query parameter api-version")
            body = {"model": request.match_info["deployment"], **body, "api_version": request.query["api-version"]}
        elif request.path.endswith("/responses"):
            body = _as_chat_request(body)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        start = time.time()
        try:
            return await self._answer(request, body)
        finally:
            self.in_flight -= 1
            if self.timing_log:  # when each request was served: what benchmarks call the LLM's own time
                schema = (body.get("response_format") or {}).get("json_schema", {}).get("name") or "chat"
                self.timing_log.write(json.dumps({"start": start, "end": time.time(), "schema": schema}) + "\n")

    async def _answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        script = self.script
        if script.latency:
            factor = self._rng.lognormvariate(0.0, script.latency_jitter) if script.latency_jitter else 1.0
            await asyncio.sleep(script.latency * factor)
        fault, reply = self._next(body)
        if fault == "http500":
            return _error(500, "injected server error")
        if fault == "http429":
            return _error(429, "injected rate limit", {"Retry-After": str(script.retry_after)})
        if fault == "http401":  # like real APIs, quote the key back (tests check that we never leak it)
            key = request.headers.get("Authorization", "").removeprefix("Bearer ")
            return _error(401, f"injected: invalid API key {key}")
        if fault == "http400":
            return _error(400, "injected: bad request")
        if fault == "hang":
            await asyncio.sleep(script.hang_seconds)
            if request.transport is not None:  # (the client may have given up already)
                request.transport.close()  # then drop the connection without a reply
            return web.Response(status=500)
        if fault == "malformed":
            return web.Response(body=b'{"id": "x", "choices": [ this is not json', content_type="application/json")
        message = {"role": "assistant", "content": ""} if fault == "empty" else _as_message(reply)
        completion = _completion(body, message)
        return web.json_response(_as_response(completion) if body.get("api") == "responses" else completion)


STUB_EMBEDDING_SIZE = 64


def stub_embedding(text: str) -> list[float]:
    vector = [0.0] * STUB_EMBEDDING_SIZE
    for word in text.lower().split():
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % STUB_EMBEDDING_SIZE] += 1.0
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status, headers=headers)


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
    message = dict(message)
    finish_reason = message.pop("finish_reason", None)  # a scripted reply may say it was cut ("length")
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
                "finish_reason": finish_reason or ("tool_calls" if message.get("tool_calls") else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def _as_chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses API request as the chat request a script reads (`messages`, `max_tokens`, chat tools)."""
    messages = [{"role": "system", "content": body["instructions"]}] if body.get("instructions") else []
    items = body.get("input", [])
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items:
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
        else:
            messages.append({"role": item.get("role", "user"), "content": item.get("content")})
    chat = {k: v for k, v in body.items() if k not in ("input", "instructions", "max_output_tokens", "tools")}
    chat |= {"api": "responses", "messages": messages}
    if "max_output_tokens" in body:
        chat["max_tokens"] = body["max_output_tokens"]
    if body.get("tools"):
        chat["tools"] = [
            {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in body["tools"]
        ]
    return chat


def _as_response(completion: dict[str, Any]) -> dict[str, Any]:
    """A chat completion as the Responses API object carrying the same reply."""
    choice = completion["choices"][0]
    message, usage = choice["message"], completion["usage"]
    output: list[dict[str, Any]] = []
    if message.get("content") is not None:
        text = {"type": "output_text", "text": message["content"], "annotations": []}
        output.append(
            {
                "type": "message",
                "id": "msg_" + completion["id"],
                "role": "assistant",
                "status": "completed",
                "content": [text],
            }
        )
    for call in message.get("tool_calls") or []:
        output.append(
            {
                "type": "function_call",
                "id": "fc_" + call["id"],
                "call_id": call["id"],
                "status": "completed",
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
            }
        )
    cut = choice["finish_reason"] == "length"
    return {
        "id": "resp_" + completion["id"],
        "object": "response",
        "created_at": completion["created"],
        "model": completion["model"],
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _load_function(spec: str) -> Callable[[dict[str, Any]], Reply]:
    import importlib.util

    path, _, name = spec.rpartition(":")
    module_spec = importlib.util.spec_from_file_location("stub_reply_module", path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a module")
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
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="play a small agent and a capable learner on "
        "clock-time questions, to rehearse the whole workflow (utu.llm.rehearsal, docs/guide.md)",
    )
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to each request")
    parser.add_argument(
        "--jitter", type=float, default=0.0, help="sigma of a log-normal factor (median 1) on each latency"
    )
    parser.add_argument(
        "--fault", action="append", default=[], metavar="KIND=RATE", help=f"KIND in {', '.join(FAULTS)}"
    )
    parser.add_argument("--retry-after", type=float, default=1.0)
    parser.add_argument("--hang-seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timing-log", metavar="FILE", help="append one JSON line per request: start, end, schema")
    args = parser.parse_args(argv)
    rates = {}
    for item in args.fault:
        kind, _, rate = item.partition("=")
        try:
            rates[kind] = float(rate)
        except ValueError:
            parser.error(f"--fault {item!r}: expected KIND=RATE, e.g. http500=0.1")
    reply_fn = _load_function(args.reply_fn) if args.reply_fn else None
    if args.rehearse:
        from utu.llm.rehearsal import Rehearsal

        reply_fn = Rehearsal()
    try:
        script = StubScript(
            reply_fn=reply_fn,
            replies=args.reply,
            latency=args.latency,
            latency_jitter=args.jitter,
            fault_rates=rates,
            retry_after=args.retry_after,
            hang_seconds=args.hang_seconds,
            seed=args.seed,
        )
    except ValueError as e:
        parser.error(str(e))
    try:
        server = StubServer(script, args.host, args.port, args.timing_log)
    except OSError as e:  # a stub left running from before holds the port, most often
        parser.exit(
            2,
            f"error: cannot listen on {args.host}:{args.port}: {e.strerror}; stop what holds it or pick "
            "another --port\n",
        )
    print(f"stub LLM listening on {server.base_url}", flush=True)
    try:
        asyncio.run(server.serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
