"""A client of ``inference_server.py``: one request at a time, each followed by
``--think-s`` seconds before the next, until killed.

Usage: ``server_client.py PORT [--think-s S]``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import urllib.request


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--think-s", type=float, default=0.8)
    args = parser.parse_args()
    url = f"http://127.0.0.1:{args.port}/predict"
    while True:
        body = json.dumps([random.random() for _ in range(64)]).encode()
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=30) as r:
            r.read()
        time.sleep(args.think_s)


if __name__ == "__main__":
    main()
