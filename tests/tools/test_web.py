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
            seen.append((self.path, self.headers.get("X-API-KEY")))
            self.rfile.read(int(self.headers["content-length"]))
            self._send(json.dumps({"organic": [{"title": "T", "link": "https://x.org", "snippet": "S"}]}).encode())

        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            self._send(b"The tower is 330 metres tall.", "text/plain")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


async def test_search_and_web_qa(monkeypatch, fake_web, stub):
    base, seen = fake_web
    monkeypatch.setenv("SERPER_API_KEY", "serper-key")
    monkeypatch.setenv("JINA_API_KEY", "jina-key")
    monkeypatch.setenv("SERPER_BASE_URL", base)
    monkeypatch.setenv("JINA_BASE_URL", base)
    llm_server = stub(StubScript(replies=["330 metres."]))
    (toolkit,) = build_toolkits([ToolkitConfig(name="search")], llm=client_for(llm_server))
    found = json.loads(await toolkit.call("search", {"query": "eiffel tower height"}))
    assert found["results"][0]["link"] == "https://x.org"
    answer = json.loads(await toolkit.call("web_qa", {"url": "https://x.org", "query": "height?"}))
    assert answer["answer"] == "330 metres."
    assert "330 metres tall" in llm_server.requests[0]["messages"][0]["content"]
    assert seen == [("/search", "serper-key"), ("/https://x.org", "Bearer jina-key")]
