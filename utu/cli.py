"""What every script shares: .env loading, logging, and turning a `UtuError` into exit code 2."""

import argparse
import asyncio
import atexit
import errno
import gc
import json
import logging
import os
import re
import select
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn, TextIO

from dotenv import find_dotenv, load_dotenv
from rich.console import Console
from rich.logging import RichHandler
from rich.text import Text

from utu.errors import UtuError
from utu.tracing.redact import RedactingFilter, redact
from utu.tracing.setup import shutdown_tracing


def read_env() -> None:
    """The .env of the working folder (or a folder above it). Variables already exported in the shell win over it
    (the reference implementation did the reverse)."""
    load_dotenv(find_dotenv(usecwd=True), override=False)


def setup(verbose: bool = False) -> None:
    hold_standard_streams()
    read_env()
    escape_what_the_terminal_cannot_show()
    handler = RichHandler(show_path=False, rich_tracebacks=True, console=Console(stderr=True))
    handler.addFilter(RedactingFilter())  # no API key ever reaches a log line
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(message)s", handlers=[handler])
    for noisy in ("httpx", "httpx2", "openai", "aiohttp", "aiosqlite"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def hold_standard_streams() -> None:
    """Standard input, output and error on /dev/null where the command was started with them closed (`2>&-`):
    else the next file opened (the database) takes their number, and what is written as a log line, by us or by
    a server we start, lands in it. Error lines then go nowhere, never to standard output. And standard error
    outlives its reader (`_OutlivesItsReader`)."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            os.dup2(os.open(os.devnull, os.O_RDWR), fd)  # (the open itself may take fd: dup2 onto itself is a no-op)
            if getattr(sys, name) is None:
                setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False))
    if not isinstance(sys.stderr, _OutlivesItsReader):
        sys.stderr = _OutlivesItsReader(sys.stderr)  # type: ignore[assignment]


class _OutlivesItsReader:
    """Standard error whose reader may leave (`2>&1 | head -1`): what is written after it left goes nowhere and the
    command goes on. A log line, a progress bar (rich then exits at once) or a closing summary stopped the run
    there, and an evaluation lost its result."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:  # its reader left (EPIPE), or its disk is full (`2>log`): the log is lost, not the run
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            self._gone()

    def _gone(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, reconfigure, ...: the stream's own
        return getattr(self._stream, name)


def escape_what_the_terminal_cannot_show() -> None:
    """A terminal that is not UTF-8 gets escapes (\\xe9), not a UnicodeEncodeError (`printed_json` writes JSON's
    own escapes there)."""
    for stream in (sys.stdout, sys.stderr):
        if callable(reconfigure := getattr(stream, "reconfigure", None)):
            reconfigure(errors="backslashreplace")


def refuse_unknown_flags(parser: argparse.ArgumentParser, overrides: list[str]) -> None:
    """Extra arguments are Hydra overrides (`key=value`); anything that looks like a flag is a typo."""
    unknown = [arg for arg in overrides if arg.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)} (Hydra overrides are written key=value)")


def tune_gc() -> None:
    """Collect cycles less often: with a run's many long-lived objects (rows, tasks, library modules), the
    default (every 700 allocations) spent ~20% of a practice step's CPU in the collector (measured with
    benchmarks/speed/practice_step.py). Memory stays bounded (benchmarks/speed/practice_scale.py) since almost all
    garbage is freed by reference counting anyway."""
    gc.freeze()  # what is loaded by now lives for the whole run: never scan it
    gc.set_threshold(20_000, 20, 20)
    gc.enable()  # utu.launch turns it off while the command's modules load


def run(main: Callable[[], Coroutine[Any, Any, int | None]]) -> None:
    """Run an async entry point; user errors print one line each and exit 2 (3: the budget was spent)."""
    tune_gc()
    try:
        code = asyncio.run(main())
        shutdown_tracing()  # flush the last spans (bounded wait) before the exit message
    except UtuError as e:
        for line in redact(str(e)).splitlines() or [type(e).__name__]:
            print(f"error: {printable(line)}", file=sys.stderr)  # (it can quote a data set's text)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        # (what is saved differs: each finished attempt and step of an evaluation or practice; a GRPO run's last
        # checkpoint, not the steps after it)
        print("interrupted: run the same command again to resume from what was saved", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        if not stdout_closed():
            raise  # another pipe (a socket, a tool's process): a traceback, as for any other bug
        sys.exit(CUT_SHORT_EXIT)
    except OSError as e:
        if e.errno != errno.ENAMETOOLONG:
            raise
        # a path from the command line or a config, at whichever check first looks at it: one line, not a traceback
        named = printable(str(e.filename or ""))
        shown = named if len(named) <= 80 else f"{named[:77]}..."
        print(
            f"error: {shown}: a file name too long (a name in a path holds at most 255 bytes, a path 4096)",
            file=sys.stderr,
        )
        sys.exit(2)
    exit_now(code or 0)


CUT_SHORT_EXIT = 1  # output whose reader closed it, as rich's console ends a command (and Python's docs advise)


def stdout_closed() -> bool:
    """Whether what reads our standard output has closed it (`library show --json | head`: the pipe's writing end
    then polls as an error, or a hang-up on a socket and on BSD's pipes); if so, it is pointed at /dev/null, so that
    the interpreter's last flush does not raise again."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        closed = any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's capture), no poll (Windows)
        return False
    if closed:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return closed


def exit_now(code: int) -> NoReturn:
    """End the process after its exit handlers, without tearing the interpreter down: by now the database
    is closed and the traces are flushed, and dismantling the thousand modules a command loads (openai,
    SQLAlchemy, pydantic models) took 0.13 s of every run (benchmarks/speed/practice_e2e.py)."""
    if any(t is not threading.main_thread() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)  # a thread is still at work: the ordinary exit waits for it
    atexit._run_exitfuncs()  # what an ordinary exit runs: worker pools, logging, temporary files
    try:
        if sys.stdout is not None:  # (None: the command was started with its standard output closed)
            sys.stdout.flush()
    except BrokenPipeError:  # the last of the output found no reader
        stdout_closed()
        code = code or CUT_SHORT_EXIT
    if sys.stderr is not None:  # (None only where a test replaced it: setup holds it open)
        sys.stderr.flush()
    os._exit(code)


DB_INT_MAX = 2**31 - 1  # what a database's integer column holds everywhere (steps, experience ids)


def step_argument(text: str) -> str | int:
    """A practice step as the command line names it (argparse type): a number, best or last."""
    if text.isascii() and text.isdigit() and int(text) <= DB_INT_MAX:
        return int(text)
    if text in ("best", "last"):
        return text
    raise argparse.ArgumentTypeError(f"expected a step number, best or last, got {text!r}")


def seconds_argument(text: str) -> float:
    """A duration in seconds (argparse type): a finite number, not below 0."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds (a number, 0 or more), got {text!r}")
    return seconds


# Control characters (an escape sequence can clear the screen, retitle the window or hide the text after it)
# and the marks that reverse the order text is shown in.
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def plain_console(min_width: int = 0) -> Console:
    """A command's standard output, where what it prints (a path, a name, a model's text) is shown as written: never
    read as rich markup (an --output_dir holding "[/x]" raised MarkupError at a run's end) or emoji codes; at least
    `min_width` columns wide, for wide tables."""
    return Console(width=max(Console().width, min_width) if min_width else None, markup=False, emoji=False)


def printable(text: str) -> str:
    """`text` as a terminal may show it: what is not printable written as its escape (an ESC as \\x1b)."""
    return _UNPRINTABLE.sub(lambda m: m[0].encode("unicode_escape").decode(), text)


# What Markdown (CommonMark, GFM tables) or the HTML inside it acts on: a link, an image, a tag, emphasis, a cell;
# and what GFM's autolinks (and markdown-it's linkify) start from: a scheme's colon, "www."
_MARKDOWN_ACTIVE = re.compile(r"[\\`*_\[\]<>!|&~#:]|(?<=[wW]{3})\.")


def markdown_text(text: str) -> str:
    """`text` (a model's, a data set's) as one line of Markdown that shows it as written: its line breaks as spaces,
    what is not printable as its escape (`printable`), and what Markdown acts on backslash-escaped, so that no link,
    image (a viewer loads one from its address as the page opens), HTML tag or table cell comes of it. (GitHub still
    links an e-mail address: a click, never a fetch.)"""
    return _MARKDOWN_ACTIVE.sub(lambda m: "\\" + m[0], printable(" ".join(text.split())))


def printed_json(value: Any, indent: int | None = None) -> str:
    """`value` as JSON for standard output: other scripts unescaped where it is UTF-8 (all escaped where not), but
    what JSON leaves raw and a terminal obeys (a C1 control such as \x9b, DEL, a bidi override) escaped as
    \\uXXXX. The same value when parsed."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    text = json.dumps(value, ensure_ascii=encoding != "utf8", indent=indent)
    return _UNPRINTABLE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def as_text(text: str) -> Text:
    """`text` for a rich table as written: "[hard]" is no markup, a control character shown as its escape."""
    return Text(printable(text))
