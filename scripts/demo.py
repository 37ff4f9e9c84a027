"""The demo on the embedded model: start it, load the bundled data, answer a few questions, score them.

    make demo          (or: python scripts/demo.py --questions 5)

No key and no network needed. Point it at a real API by setting UTU_LLM_BASE_URL/UTU_LLM_MODEL/UTU_LLM_API_KEY
in .env (see .env.example).
"""

import argparse
import logging

from rich.console import Console
from rich.table import Table
from sqlalchemy import select

from utu import cli
from utu.config import EvalConfig, load_config
from utu.db import Database, DatasetSample
from utu.db.dataset_io import ensure_dataset
from utu.llm.factory import make_client

log = logging.getLogger("demo")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config_name", default="local/mawps")
    parser.add_argument("--questions", type=int, default=5)
    args = parser.parse_args()
    config = load_config("eval", args.config_name, EvalConfig)
    db = Database()
    await db.create_tables()
    name = config.data.dataset
    size = await ensure_dataset(db, name)
    log.info("data set %s: %d questions in %s", name, size, db.describe())
    async with db.sessions() as s:
        samples = list(
            await s.scalars(
                select(DatasetSample)
                .where(DatasetSample.dataset == name)
                .order_by(DatasetSample.index)
                .limit(args.questions)
            )
        )
    await db.dispose()
    client = make_client(config.agent.model)
    table = Table(title=f"{config.agent.name} on {name} ({client.model})", show_lines=True)
    for column in ("question", "gold", "model's answer"):
        table.add_column(column, overflow="fold")
    for sample in samples:
        messages = [
            {"role": "system", "content": config.agent.instructions},
            {"role": "user", "content": sample.question},
        ]
        reply = await client.chat(messages, tag="demo")
        table.add_row(sample.question, sample.answer or "", reply.content.strip())
    Console().print(table)
    usage = client.usage.total()
    print(f"{usage.calls} calls, {usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens")
    await client.close()
    if client.model == "smollm2-135m-instruct":
        print("The embedded model keeps running for the next command; stop it with `python -m utu.llm.local stop`.")
    return 0


if __name__ == "__main__":
    cli.setup()
    cli.run(main)
