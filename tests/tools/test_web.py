"""Web tools: clear failure at start without keys; search and page reading against local fake services."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import client_for
from utu.config import AgentConfig, ToolkitConfig
from utu.errors import ConfigError
from utu.llm.stub import StubScript
from utu.tools import build_toolkits


def test_missing_keys_fail_at_start_naming_them(monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    monkeypatch.setenv("JINA_API_KEY", "j")
    config = AgentConfig(toolkits=[ToolkitConfig(name="search")])
    with pytest.raises(ConfigError, match="SERPER_API_KEY"):
        build_toolkits(config.toolkits, llm=object())


@pytest.fixture
def fake_web():
    seen = []
    search_answer = [json.dumps({"organic": [{"title": "T", "link": "https://x.org", "snippet": "S"}]}).encode()]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, body: bytes, kind="application/json"):
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            seen.append(
                (
                    self.path,
                    self.headers.get("X-API-KEY"),
                    json.loads(self.rfile.read(int(self.headers["content-length"]))),
                )
            )
            self._send(search_answer[0])

        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            self._send(b"The tower is 330 metres tall.", "text/plain")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen, search_answer
    server.shutdown()


def search_toolkit(monkeypatch, base: str, llm_server):
    monkeypatch.setenv("SERPER_API_KEY", "serper-key")
    monkeypatch.setenv("JINA_API_KEY", "jina-key")
    monkeypatch.setenv("SERPER_BASE_URL", base)
    monkeypatch.setenv("JINA_BASE_URL", base)
    (toolkit,) = build_toolkits([ToolkitConfig(name="search")], llm=client_for(llm_server))
    return toolkit


async def test_search_and_web_qa(monkeypatch, fake_web, stub):
    base, seen, _ = fake_web
    llm_server = stub(StubScript(replies=["330 metres."]))
    toolkit = search_toolkit(monkeypatch, base, llm_server)
    found = json.loads(await toolkit.call("search", {"query": "eiffel tower height"}))
    assert found["results"][0]["link"] == "https://x.org"
    answer = json.loads(await toolkit.call("web_qa", {"url": "https://x.org", "query": "height?"}))
    assert answer["answer"] == "330 metres."
    assert "330 metres tall" in llm_server.requests[0]["messages"][0]["content"]
    assert seen == [
        ("/search", "serper-key", {"q": "eiffel tower height", "num": 5}),
        ("/https://x.org", "Bearer jina-key"),
    ]


@pytest.mark.parametrize(
    ("asked", "sent"),
    [
        (None, 5),
        (3, 3),
        ("2", 2),
        ("5.0", 5),
        ("1e1", 10),
        (0, 1),
        (-4, 1),
        (10**400, 10),
        ("9" * 5000, 10),
        (float("-inf"), 1),
        (float("nan"), 5),
        ("x", None),
        ([3], None),
    ],
)
async def test_the_number_of_results_a_model_asks_for_is_kept_between_1_and_10(
    monkeypatch, fake_web, stub, asked, sent
):
    base, seen, _ = fake_web
    toolkit = search_toolkit(monkeypatch, base, stub(StubScript(replies=["-"])))
    found = json.loads(await toolkit.call("search", {"query": "q", "num_results": asked}))
    if sent is None:  # refused before any request
        assert found["error"].startswith("bad arguments for search: num_results must be a number") and not seen
    else:
        assert seen[0][2]["num"] == sent and "results" in found


@pytest.mark.parametrize(
    "answer", [b"<html>502 Bad Gateway</html>", b"[1, 2]", b'{"organic": "none"}', b'{"organic": [1, null]}', b"{}"]
)
async def test_a_search_answer_of_another_shape_is_an_error_or_no_results_never_a_crash(
    monkeypatch, fake_web, stub, answer
):
    base, _, search_answer = fake_web
    search_answer[0] = answer
    toolkit = search_toolkit(monkeypatch, base, stub(StubScript(replies=["-"])))
    found = json.loads(await toolkit.call("search", {"query": "q"}))
    assert (
        found == {"results": []} if answer.startswith((b'{"organic": [', b"{}")) else "not its JSON" in found["error"]
    )
