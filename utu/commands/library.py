"""Inspect, compare and export the experience libraries practice learned.

    python -m utu.commands.library show --exp_id P [--step N|best|last] [--json]
    python -m utu.commands.library diff --exp_id P --from 0 --to 3 [--json]
    python -m utu.commands.library diff P@last Q@best                # two experiments
    python -m utu.commands.library export --exp_id P --step best --to library.yaml|.json|.md [--force]
    python -m utu.commands.library merge P@best Q@last --to PQ [--no_llm]   # a new experiment PQ
    python -m utu.commands.library screen --file proposals.jsonl [--json]   # why would it be refused?

A step is a number, `best` (highest validation or in-step eval score) or `last`. Exported YAML/JSON files
are what `practice.init_library` and `--init_library` read.
"""

import argparse
import contextlib
import dataclasses
import json
import sys
from pathlib import Path

import yaml
from rich.table import Table

from utu import cli
from utu.app import open_client
from utu.commands import screen as screen_command
from utu.config.flags import add_db_flag
from utu.config.loader import load_model_config
from utu.db import Database
from utu.errors import ConfigError
from utu.names import check_name, replace_text
from utu.practice.history import applied_operations, diff, provenance
from utu.practice.initial import library_at, reference
from utu.practice.merge import merge

console = cli.plain_console(120)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m utu.commands.library", description=__doc__.split("\n\n")[0])
    add_db_flag(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("show", help="the library with each experience's provenance")
    show.add_argument("--exp_id", required=True)
    show.add_argument("--step", default="last", type=cli.step_argument, help="a step number, best or last (default)")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    compare = commands.add_parser("diff", help="what changed between two libraries")
    compare.add_argument("refs", nargs="*", metavar="EXP@STEP", help="two libraries, e.g. P@0 P@last")
    compare.add_argument("--exp_id")
    compare.add_argument("--from", dest="from_step", type=cli.step_argument)
    compare.add_argument("--to", dest="to_step", default="last", type=cli.step_argument)
    compare.add_argument("--json", action="store_true", help="machine-readable output")
    export = commands.add_parser("export", help="write a library to a YAML, JSON or Markdown file")
    export.add_argument("--exp_id", required=True)
    export.add_argument("--step", default="last", type=cli.step_argument, help="a step number, best or last (default)")
    export.add_argument("--to", required=True, type=_file_argument, help="file.yaml, file.json or file.md")
    export.add_argument("--force", action="store_true", help="replace the file --to names if it exists")
    combine = commands.add_parser("merge", help="combine libraries into a new experiment (near duplicates merged)")
    combine.add_argument("refs", nargs="+", metavar="EXP[@STEP]", help="libraries to combine (default step: last)")
    combine.add_argument("--to", required=True, dest="name", help="the new experiment's id")
    combine.add_argument("--no_llm", action="store_true", help="no learner: drop near-duplicates by rule only")
    for command in (show, compare, export, combine):  # --db_url after the subcommand too (not there: the one before)
        command.add_argument("--db_url", default=argparse.SUPPRESS, help="SQLAlchemy URL, as before the subcommand")
    screen_command.add_parser(commands)
    args = parser.parse_args()
    if args.command == "merge" and len(args.refs) < 2:
        parser.error("merge: give at least two libraries")
    if args.command == "diff":
        if args.refs and (args.exp_id or args.from_step is not None):
            parser.error("diff: give either two EXP@STEP references or --exp_id with --from/--to")
        if not args.refs and not (args.exp_id and args.from_step is not None):
            parser.error("diff: give two EXP@STEP references, or --exp_id P --from N [--to M]")
        if args.refs and len(args.refs) != 2:
            parser.error(f"diff: expected two EXP@STEP references, got {len(args.refs)}")
    if args.command == "export" and args.to.suffix.lower() not in (".yaml", ".yml", ".json", ".md"):
        parser.error(f"export --to {args.to}: the file must end in .yaml, .json or .md")
    return args


def _file_argument(text: str) -> Path:
    try:
        return Path(text).expanduser()  # ~/x.yaml as the shell would have it
    except RuntimeError as e:  # ~nobody/x.yaml: no such user
        raise argparse.ArgumentTypeError(str(e)) from None


def _ref(text: str) -> tuple[str, str | int]:
    named = reference(text)
    if named is None:
        raise ConfigError(f"{text!r}: expected EXP_ID@STEP, e.g. my_practice@last or my_practice@3")
    return named


async def show_command(db: Database, args) -> None:
    library, step = await library_at(db, args.exp_id, args.step, f"show --exp_id {args.exp_id}")
    entries = provenance(library, await applied_operations(db, args.exp_id, up_to=step))
    if args.json:
        experiences = [dataclasses.asdict(e) for e in entries]
        print(cli.printed_json({"exp_id": args.exp_id, "step": step, "experiences": experiences}, indent=2))
        return
    table = Table(title=f"{args.exp_id}, library after step {step} ({len(entries)} experiences)", show_lines=True)
    for column in ("id", "experience", "added", "from questions", "rationale", "updated at steps"):
        table.add_column(column)
    for e in entries:
        origin = e.origin
        table.add_row(
            cli.as_text(e.id),
            cli.as_text(e.text),
            f"step {origin.step}" if origin else "before step 0",
            ", ".join(map(str, origin.source_questions)) if origin else "",
            cli.as_text((origin.rationale or "") if origin else ""),
            ", ".join(str(u.step) for u in e.updates),
        )
    console.print(table)


async def diff_command(db: Database, args) -> None:
    if args.refs:
        (a, a_step), (b, b_step) = map(_ref, args.refs)
    else:
        a, a_step, b, b_step = args.exp_id, args.from_step, args.exp_id, args.to_step
    before, first = await library_at(db, a, a_step, f"diff {a}@{a_step}")
    after, last = await library_at(db, b, b_step, f"diff {b}@{b_step}")
    operations = await applied_operations(db, b) if a == b else []
    result = diff(before, after, operations, range(first + 1, last + 1), same_ids=a == b)
    if args.json:
        print(cli.printed_json({"from": f"{a}@{first}", "to": f"{b}@{last}", **dataclasses.asdict(result)}, indent=2))
        return
    table = Table(title=f"{a}@{first} -> {b}@{last}", show_lines=True)
    for column in ("id", "change", "text", "why (the operation log)"):
        table.add_column(column)
    for key, text in result.added.items():
        table.add_row(cli.as_text(key), "added", cli.as_text(text), cli.as_text(_why(result, key)))
    for key, (old, new) in result.updated.items():
        table.add_row(cli.as_text(key), "updated", cli.as_text(f"{old}\n-> {new}"), cli.as_text(_why(result, key)))
    for key, text in result.deleted.items():
        table.add_row(cli.as_text(key), "deleted", cli.as_text(text), cli.as_text(_why(result, key)))
    console.print(table if table.row_count else f"{a}@{first} and {b}@{last} hold the same experiences")


def _why(result, key: str) -> str:
    return "\n".join(
        f"step {c.step} {c.kind}: {c.rationale or '-'} (questions {c.source_questions})"
        for c in result.reasons.get(key, [])
    )


async def export_command(db: Database, args) -> None:
    if args.to.is_dir():
        raise ConfigError(f"export --to {args.to}: that is a folder; name a file (library.yaml, .json or .md)")
    if args.to.exists() and not args.force:
        raise ConfigError(f"export --to {args.to}: the file exists; pass --force to replace it, or name another")
    library, step = await library_at(db, args.exp_id, args.step, f"export --exp_id {args.exp_id}")
    data = {"exp_id": args.exp_id, "step": step, "experiences": dict(library.experiences)}
    if args.to.suffix.lower() == ".json":
        text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    elif args.to.suffix.lower() == ".md":
        lines = [f"# Experiences of {args.exp_id}, step {step}", ""]
        # one line each, shown as written: a line break makes no entry of its own, a learner's image link no image
        lines += [
            f"- **[{cli.markdown_text(key)}]** {cli.markdown_text(text)}" for key, text in library.experiences.items()
        ]
        text = "\n".join(lines) + "\n"
    else:
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)
    try:
        args.to.parent.mkdir(parents=True, exist_ok=True)
        replace_text(args.to, text)  # a full disk leaves the old file as it was, never a part of the new one
    except OSError as e:
        raise ConfigError(f"export --to {args.to}: cannot write it: {e.strerror}") from e
    print(f"{len(library.experiences)} experiences of {args.exp_id}@{step} written to {args.to}", file=sys.stderr)


async def merge_command(db: Database, args) -> None:
    check_name(args.name, "merge --to")
    refs = [_ref(ref if "@" in ref else f"{ref}@last") for ref in args.refs]
    async with contextlib.AsyncExitStack() as stack:
        learner = None
        if not args.no_llm:
            learner = await open_client(stack, load_model_config("base"))
        library, dropped = await merge(db, refs, args.name, learner, stack)
    print(
        f"{args.name}: {len(library.experiences)} experiences from {len(args.refs)} libraries "
        f"({dropped} merged or dropped as duplicates); see: show --exp_id {args.name}",
        file=sys.stderr,
    )


async def run() -> int:
    args = parse_args()
    if args.command == "screen":  # no database: the file holds all it needs
        return screen_command.run(args)
    async with Database(args.db_url) as db:
        if not db.exists():  # every command reads libraries: a mistyped --db_url makes no database
            raise ConfigError(f"{args.command}: no database at {db.describe()}; pass the --db_url practice used")
        await db.create_tables()
        handlers = {"show": show_command, "diff": diff_command, "export": export_command, "merge": merge_command}
        await handlers[args.command](db, args)
    return 0


def main() -> None:
    cli.setup()
    cli.run(run)


if __name__ == "__main__":
    main()
