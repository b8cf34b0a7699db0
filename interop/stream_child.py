"""A stream runner for test_streams.py to SIGKILL: prints a line per message."""

import asyncio
import sys

from queen import Queen, Stream


async def main(url: str, src: str, dst: str, qid: str) -> None:
    q = Queen(url)

    async def slow(message):
        await asyncio.sleep(0.02)
        print("seen", flush=True)
        return message["data"]

    await Stream.from_(q.queue(src)).map(slow).to(q.queue(dst)).run(
        query_id=qid, url=url, batch_size=10, max_wait_millis=200)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
