"""Serve enhanced agents as an OpenAI-compatible endpoint, so any OpenAI client benefits from a learned library.

    python -m utu.serve --agent_config runs/P/enhanced_agent.yaml [--agent_config other.yaml] [--port 8000]
    python -m utu.serve --exp_id P --step best          # the experiment's agent with the library of that step

`POST /v1/chat/completions` (also `"stream": true`), `GET /v1/models`, `GET /health`. Each request is
answered by the agent: its system prompt and library placed by the same function as in practice and
evaluation, its tools run in the sandbox, its model called through utu's client; the reply is the agent's
final message, with the usage of all its turns. Several agents are served side by side, one model name
each (`--agent_config NAME=PATH`, else the agent's `name`). Loopback by default; with `UTU_SERVE_API_KEY`
set, requests need `Authorization: Bearer <key>`. A bad request gets OpenAI's error shape and status.
"""

import argparse
import asyncio
import contextlib
import hmac
import json
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import openai
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from utu import cli
from utu.agents import Agent
from utu.agents.experience import place_library
from utu.app import open_agent, open_client
from utu.config import load_agent_config
from utu.config.flags import add_place_flags
from utu.config.models import AgentConfig
from utu.errors import ConfigError, EndpointError, LLMError
from utu.tracing import setup_tracing
from utu.tracing.spans import AGENT, set_io, span

log = logging.getLogger("serve")
SETTINGS = ("temperature", "top_p", "max_tokens", "seed")  # request fields passed on to the agent's model
# What the agent's model says when the request, not the server, is at fault: a conversation longer than its
# context, a setting out of its range. The client can fix that; a 502 would tell it to retry.
REQUEST_FAULTS = (400, 413, 422)


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[Any] | None = None


class ChatRequest(BaseModel):
    # strict: JSON's own types ("stream": "yes" is no boolean); OpenAI clients send more fields (user, metadata)
    model_config = ConfigDict(extra="allow", strict=True)
    model: str
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, gt=0)
    max_completion_tokens: int | None = Field(None, gt=0)  # the newer name of max_tokens
    seed: int | None = None
    # What a served agent cannot honour, refused rather than ignored: one answer, its own tools, plain text.
    n: int | None = Field(None, ge=1, le=1)
    tools: list[Any] | None = Field(None, max_length=0)
    functions: list[Any] | None = Field(None, max_length=0)  # the older name of tools
    response_format: dict[str, Literal["text"]] | None = None
    stop: str | list[str] | None = Field(None, max_length=0)
    logprobs: Literal[False] | None = None


@dataclass
class Served:
    name: str
    agent: Agent


def openai_error(
    status: int, message: str, kind: str = "invalid_request_error", code: str | None = None, param: str | None = None
) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status)


IN_FLIGHT = web.AppKey("in_flight", list)  # [the number of requests being answered]
# What requests in flight get to finish once the server is told to stop; then aiohttp cancels them (and gives
# them as long again to unwind).
SHUTDOWN_SECONDS = 30.0


def make_app(agents: dict[str, Served], api_key: str | None = None, deadline: float | None = None) -> web.Application:
    in_flight = [0]

    @web.middleware
    async def guard(request: web.Request, handler):
        if api_key and request.path != "/health":
            scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
            given = token.strip() if scheme.lower() == "bearer" else ""  # the scheme's case does not matter
            # (a header's bytes that are not UTF-8 compare as replaced, never as an error)
            if not hmac.compare_digest(given.encode(errors="replace"), api_key.encode()):
                return openai_error(401, "invalid API key", "invalid_request_error", "invalid_api_key")
        in_flight[0] += 1
        try:
            return await handler(request)
        except web.HTTPException as e:
            return openai_error(e.status, e.reason, code="not_found" if e.status == 404 else None)
        except Exception:  # never a traceback to the client
            log.exception("serving %s failed", request.path)
            return openai_error(500, "internal error (see the server log)", "server_error")
        finally:
            in_flight[0] -= 1

    async def health(request: web.Request) -> web.Response:
        # open to all (liveness probes carry no key): the models' names only where no key is asked
        return web.json_response({"status": "ok"} | ({} if api_key else {"models": sorted(agents)}))

    async def models(request: web.Request) -> web.Response:
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "utu"} for name in agents]
        return web.json_response({"object": "list", "data": data})

    async def chat(request: web.Request) -> web.StreamResponse:
        try:
            body = ChatRequest.model_validate_json(await request.read())
        except ValidationError as e:
            err = e.errors()[0]
            param = ".".join(map(str, err["loc"])) or None
            return openai_error(400, f"{param or 'body'}: {err['msg']}", param=param)
        served = agents.get(body.model)
        if served is None:
            return openai_error(
                404,
                f"The model {body.model!r} does not exist; served: {', '.join(agents)}",
                code="model_not_found",
                param="model",
            )
        conversation = [m.model_dump(exclude_none=True) for m in body.messages]
        for i, m in enumerate(conversation):
            if m["role"] == "developer":
                m["role"] = "system"
            parts = m.get("content") if m["role"] == "system" else None  # text parts place_library joins
            if isinstance(parts, list) and any(not isinstance(p, dict) or p.get("type") != "text" for p in parts):
                return openai_error(400, "a system message's parts must be text", param=f"messages.{i}.content")
        settings = {k: getattr(body, k) for k in SETTINGS if getattr(body, k) is not None}
        if body.max_completion_tokens is not None:
            settings["max_tokens"] = body.max_completion_tokens
        messages = place_library(served.agent.config, conversation)
        limit = asyncio.timeout(deadline)
        try:
            with span(
                f"serve {served.name}", AGENT, input=conversation[-1].get("content"), **{"model": body.model}
            ) as s:
                async with limit:
                    result = await served.agent.run_messages(messages, tag="serve", **settings)
                set_io(s, "output", result.response)
        except TimeoutError:
            if not limit.expired():  # a timeout of its own making, not ours
                raise
            log.warning("serving %s: the agent did not finish within %g s (--request_timeout)", served.name, deadline)
            return openai_error(504, f"the agent did not finish within {deadline:g} s", "server_error", "timeout")
        except (LLMError, EndpointError) as e:
            # the details (the endpoint, hints, what it said back, which can quote a key) are the operator's
            log.warning("serving %s: the agent's model failed: %s", served.name, e)
            cause = e.__cause__
            if isinstance(cause, openai.APIStatusError) and cause.status_code in REQUEST_FAULTS:
                refused = (
                    f"the agent's model refused this request (HTTP {cause.status_code}): a conversation longer than its"
                    " context, or a setting it does not take; the server log says which"
                )
                return openai_error(400, refused, code="upstream_refused")
            failed = f"the agent's model failed ({type(e).__name__}; see the server log)"
            return openai_error(502, failed, "server_error", "upstream_error")
        reply = completion(body.model, result)
        if not body.stream:
            return web.json_response(reply)
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        return await stream(request, reply, include_usage)

    app = web.Application(middlewares=[guard], client_max_size=16 * 2**20)
    app[IN_FLIGHT] = in_flight
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


def completion(model: str, result) -> dict[str, Any]:
    usage = result.usage
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.response},
                "finish_reason": "stop" if result.stop_reason == "final" else "length",
            }
        ],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        },
    }


async def stream(request: web.Request, reply: dict[str, Any], include_usage: bool) -> web.StreamResponse:
    """The finished reply as server-sent chunks (the agent's tool loop runs before its final message exists); the
    usage chunk only when `stream_options.include_usage` asks for it, as OpenAI sends it."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    choice = reply["choices"][0]
    base = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    deltas = [
        ({"role": "assistant", "content": ""}, None),
        ({"content": choice["message"]["content"]}, None),
        ({}, choice["finish_reason"]),
    ]
    events = [base | {"choices": [{"index": 0, "delta": delta, "finish_reason": end}]} for delta, end in deltas]
    if include_usage:
        events.append(base | {"choices": [], "usage": reply["usage"]})
    try:
        await response.prepare(request)
        for event in events:
            await response.write(f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    except ConnectionResetError:  # the client left: nothing to tell it, nothing wrong here
        log.debug("serving %s: the client closed the stream", reply["model"])
    return response


async def load_agents(args, stack: contextlib.AsyncExitStack) -> dict[str, Served]:
    configs: list[tuple[str | None, AgentConfig]] = []
    for spec in args.agent_config or []:
        name, named, path = spec.partition("=")
        if not named or Path(spec).is_file():  # "runs/lr=0.1/agent.yaml" is a file: a path
            name, path = "", spec
        configs.append((name or None, load_agent_config(path)))
    if args.exp_id:
        configs.append((None, await experiment_agent(args)))
    if not configs:
        raise ConfigError("give --agent_config PATH (repeatable) or --exp_id P [--step best|last|N]")
    agents: dict[str, Served] = {}
    for name, config in configs:
        name = name or config.name
        if name in agents:
            raise ConfigError(f"two agents are named {name!r}: serve them as --agent_config NAME=PATH")
        client = await open_client(stack, config.model)
        agents[name] = Served(name, await open_agent(stack, config, client))
    return agents


async def experiment_agent(args) -> AgentConfig:
    """runs/<exp_id>/enhanced_agent.yaml with the library of `--step`."""
    from utu.db import Database
    from utu.practice.initial import library_at

    path = args.output_dir / args.exp_id / "enhanced_agent.yaml"
    if not path.is_file():
        raise ConfigError(f"{path}: no enhanced agent there; run the practice first (or give --agent_config)")
    config = load_agent_config(str(path))
    async with Database(args.db_url) as db:
        library, step = await library_at(db, args.exp_id, args.step, f"--exp_id {args.exp_id} --step {args.step}")
    log.info("%s: the library of step %d (%d experiences)", args.exp_id, step, len(library.experiences))
    return config.model_copy(update={"experiences": dict(library.experiences), "name": args.exp_id})


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m utu.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--agent_config", action="append", metavar="[NAME=]PATH", help="an agent (repeatable)")
    parser.add_argument("--exp_id", help="serve this practice's enhanced agent")
    parser.add_argument(
        "--step", default="last", type=cli.step_argument, help="with --exp_id: the library of step N, best or last"
    )
    add_place_flags(parser, "the enhanced agent --exp_id serves")
    parser.add_argument("--host", default="127.0.0.1", help="127.0.0.1 (default): this machine only")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument(
        "--request_timeout",
        type=cli.seconds_argument,
        default=600.0,
        help="seconds an agent gets to answer one request (its turns and tools), else a 504; 0: no limit",
    )
    return parser.parse_args()


async def run() -> int:
    args = parse_args()
    setup_tracing()
    api_key = os.environ.get("UTU_SERVE_API_KEY") or None
    if args.host not in ("127.0.0.1", "localhost", "::1") and not api_key:
        log.warning("serving on %s without UTU_SERVE_API_KEY: anyone who reaches it can use your model", args.host)
    async with contextlib.AsyncExitStack() as stack:
        agents = await load_agents(args, stack)
        app = make_app(agents, api_key, args.request_timeout or None)
        # handler_cancellation: a client that leaves cancels its request, whose agent stops calling its model
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=SHUTDOWN_SECONDS)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
        port = runner.addresses[0][1]  # the chosen one, with --port 0
        host = f"[{args.host}]" if ":" in args.host else args.host or "0.0.0.0"  # an IPv6 address in a URL
        print(f"serving {', '.join(agents)} at http://{host}:{port}/v1", flush=True)
        await until_told_to_stop()
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second time: stop at once
            asyncio.get_running_loop().add_signal_handler(sig, cancel_now, asyncio.current_task())
        if app[IN_FLIGHT][0]:
            log.warning(
                "stopping: %d request(s) in flight get %g s to finish, then are cancelled; Ctrl-C again stops at once",
                app[IN_FLIGHT][0],
                SHUTDOWN_SECONDS,
            )
        try:
            await stack.aclose()  # the server first (its requests end), then the agents' clients and tools
        except asyncio.CancelledError:
            log.warning("stopped at once: the requests in flight were cut off")
            return 130
    return 0


async def until_told_to_stop() -> None:
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()


def cancel_now(task: asyncio.Task | None) -> None:
    if task is not None:
        task.cancel()


def main() -> None:
    cli.setup()
    cli.run(run)


if __name__ == "__main__":
    main()
