"""How long a big atomic write waits for the disk once its last piece is written, flushed as it goes or not.

    python benchmarks/atomic_write.py [--mb 1024] [--piece-mb 5] [--make-s 10] [--rounds 2] [--dir DIR]

``tasks.files.write_atomic`` writes pieces as a producer makes them (an export's records, a report's lines),
then fsyncs the file before renaming it into place. The page cache starts writing a file back on its own
only past a tenth of memory or after 30 s, so without help the whole file is still to be written when the
last piece is: the fsync waits for all of it. Every ``SYNC_EVERY`` bytes, ``write_atomic`` hands an
``fdatasync`` to a thread while the next pieces are written. This writes ``--mb`` MB in pieces of
``--piece-mb``, a producer's ``--make-s`` seconds spread between them, with that flush (as shipped) and
without it (``SYNC_EVERY`` past the file's size), alternated ``--rounds`` times, and prints the time from
the last piece to the file in place, and the whole write's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # last: PYTHONPATH=OTHER_CHECKOUT picks its code

import tasks.files as files


def pieces(total: int, size: int, make_s: float, last: list[float]) -> Iterator[bytes]:
    """``total`` bytes in pieces of ``size``, ``make_s`` seconds spread between them; ``last``: when the last
    piece was handed over."""
    count = -(-total // size)
    piece = os.urandom(size)
    for _ in range(count):
        time.sleep(make_s / count)
        last[:] = [time.perf_counter()]
        yield piece


def timed(path: Path, args: argparse.Namespace, sync_every: int) -> tuple[float, float]:
    """(seconds from the last piece to the file in place, seconds of the whole write)."""
    files.SYNC_EVERY = sync_every
    last: list[float] = []
    start = time.perf_counter()
    files.write_atomic(path, pieces(args.mb * 2**20, args.piece_mb * 2**20, args.make_s, last))
    done = time.perf_counter()
    path.unlink()
    return done - last[0], done - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="the file's size")
    parser.add_argument("--piece-mb", type=int, default=5, help="each piece's size")
    parser.add_argument("--make-s", type=float, default=10.0, help="the producer's time, spread between pieces")
    parser.add_argument("--rounds", type=int, default=2, help="times each way, alternated")
    parser.add_argument("--dir", type=Path, help="where the file is written (default: a temporary folder)")
    args = parser.parse_args()
    shipped = files.SYNC_EVERY
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        path = Path(folder) / "big.out"
        rows = []
        for _ in range(args.rounds):
            for label, every in (("flushed as it goes (shipped)", shipped), ("one fsync at the end", 2**62)):
                wait, whole = timed(path, args, every)
                rows.append(f"| {label} | {wait:.2f} s | {whole:.2f} s |")
                print(rows[-1], flush=True)
    print()
    print(f"    python benchmarks/atomic_write.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"    ({args.mb:,} MB in {args.piece_mb} MB pieces over {args.make_s:g} s; SYNC_EVERY {shipped // 2**20} MB)")
    print()
    print("| write | last piece to file in place | whole write |\n|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
