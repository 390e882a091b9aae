"""A log keeper: reads a job's output on stdin and writes each line, prefixed with
the time it arrived, to the file it is given (a pipe's reader that writes the
log itself, as a ``python -u`` log shipper or ``ts > log`` does).

Usage: ``python train.py | python -u timestamper.py train.log``.
"""

from __future__ import annotations

import sys
import time


def main(path: str) -> None:
    with open(path, "a", buffering=1) as log:
        for line in sys.stdin:
            now = time.time()
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
            log.write(f"{stamp}.{int(now % 1 * 1e6):06d} {line}")


if __name__ == "__main__":
    main(sys.argv[1])
