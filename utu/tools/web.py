"""Web tools: search through Serper (Google results) and page reading through Jina plus an LLM summary.

Both keys are required at start (`SERPER_API_KEY`, `JINA_API_KEY`); a missing key is a config error
before any rollout begins. `SERPER_BASE_URL` and `JINA_BASE_URL` override the endpoints (for proxies
and tests).
"""

import os
from typing import Any

from utu.config.models import ToolkitConfig
from utu.errors import ConfigError
from utu.tools.base import as_text, function_schema

PAGE_CHARS = 20000
DEFAULT_RESULTS = 5
MAX_RESULTS = 10  # a model may ask for any number of results: Serper's first page, at most

SUMMARY_PROMPT = """Read the web page below and answer the query from it. Quote exact facts (names, numbers,
dates) and say plainly if the page does not contain the answer. List up to 5 links on the page that look
most useful for the query.

Query: {query}
URL: {url}
Page:
{page}"""


class SearchToolkit:
    def __init__(self, config: ToolkitConfig, serper_key: str, jina_key: str, llm: Any):
        self.config = config
        self.serper_key = serper_key
        self.jina_key = jina_key
        self.llm = llm
        self.serper_url = os.environ.get("SERPER_BASE_URL", "https://google.serper.dev")
        self.jina_url = os.environ.get("JINA_BASE_URL", "https://r.jina.ai")

    @classmethod
    def from_env(cls, config: ToolkitConfig, llm: Any) -> "SearchToolkit":
        missing = [k for k in ("SERPER_API_KEY", "JINA_API_KEY") if not os.environ.get(k)]
        if missing:
            raise ConfigError(f"toolkit 'search' needs {' and '.join(missing)}: set them in .env (see .env.example)")
        if llm is None:
            raise ConfigError("toolkit 'search' needs an LLM to summarise pages")
        return cls(config, os.environ["SERPER_API_KEY"], os.environ["JINA_API_KEY"], llm)

    def schemas(self) -> list[dict[str, Any]]:
        return [
            function_schema(
                "search",
                "Search the web. Returns titles, links and snippets.",
                {
                    "query": {"type": "string"},
                    "num_results": {
                        "type": "integer",
                        "default": DEFAULT_RESULTS,
                        "minimum": 1,
                        "maximum": MAX_RESULTS,
                    },
                },
                ["query"],
            ),
            function_schema(
                "web_qa",
                "Read a web page and answer a query from its content.",
                {"url": {"type": "string"}, "query": {"type": "string"}},
                ["url", "query"],
            ),
        ]

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        import httpx  # here, not at the top: httpx's own imports (its CLI: click, pygments) cost every run 19 ms

        try:
            if name == "search":
                return await self._search(str(arguments["query"]), _result_count(arguments.get("num_results")))
            if name == "web_qa":
                return await self._web_qa(str(arguments["url"]), str(arguments["query"]))
        except (KeyError, ValueError) as e:
            return as_text({"error": f"bad arguments for {name}: {e}"})
        except httpx.HTTPError as e:
            return as_text({"error": f"{name} failed: {type(e).__name__}: {e}"})
        raise KeyError(name)

    async def _search(self, query: str, num_results: int) -> str:
        import httpx

        async with httpx.AsyncClient(timeout=self.config.timeout) as http:
            r = await http.post(
                f"{self.serper_url}/search",
                json={"q": query, "num": num_results},
                headers={"X-API-KEY": self.serper_key},
            )
            r.raise_for_status()
        try:
            found = r.json()
        except ValueError:  # not JSON: a proxy's error page, say
            found = None
        organic = found.get("organic") or [] if isinstance(found, dict) else None
        if not isinstance(organic, list):
            return as_text(
                {"error": f"search failed: the search service's answer is not its JSON (HTTP {r.status_code})"}
            )
        results = [
            {"title": o.get("title"), "link": o.get("link"), "snippet": o.get("snippet")}
            for o in organic
            if isinstance(o, dict)
        ][:num_results]
        return as_text({"results": results})

    async def _web_qa(self, url: str, query: str) -> str:
        import httpx

        async with httpx.AsyncClient(timeout=self.config.timeout) as http:
            r = await http.get(f"{self.jina_url}/{url}", headers={"Authorization": f"Bearer {self.jina_key}"})
            r.raise_for_status()
        page = r.text[:PAGE_CHARS]
        prompt = SUMMARY_PROMPT.format(query=query, url=url, page=page)
        reply = await self.llm.chat([{"role": "user", "content": prompt}], tag="tool.web_qa")
        return as_text({"url": url, "answer": reply.content})


def _result_count(asked: object) -> int:
    """How many results to return: the model's number (DEFAULT_RESULTS when it gives none; "5", 5.0 and "1e1" are
    numbers too), brought within 1 to MAX_RESULTS."""
    if asked is None:
        return DEFAULT_RESULTS
    try:
        if isinstance(asked, bool) or not isinstance(asked, int | float | str):
            raise TypeError
        number = asked if isinstance(asked, int) else float(asked)  # (an int past a float's range stays one)
    except (TypeError, ValueError):
        raise ValueError(f"num_results must be a number, not {str(asked)[:40]!r}") from None
    if number != number:  # NaN: as if none were given
        return DEFAULT_RESULTS
    return int(min(max(number, 1), MAX_RESULTS))
