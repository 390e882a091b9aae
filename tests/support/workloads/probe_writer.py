"""Holds files open the way a training job does, for the storage probe tests.

Usage: probe_writer.py DIR [EXTRA_DIR...]
Opens DIR/data.bin read-only (a dataset shard), DIR/train.log for append and
DIR/ckpt.pt for writing (a checkpoint being saved), plus EXTRA_DIR/shard.bin
read-only in each extra directory; prints ``READY``, then keeps writing 1 MiB
chunks to the checkpoint with fsync so the disk really sees writes.
"""

from __future__ import annotations

import os
import sys
import time

root = sys.argv[1]
with open(os.path.join(root, "data.bin"), "wb") as fh:
    fh.write(b"x" * 4096)
data = open(os.path.join(root, "data.bin"), "rb")  # noqa: SIM115
log = open(os.path.join(root, "train.log"), "a")  # noqa: SIM115
ckpt = open(os.path.join(root, "ckpt.pt"), "wb")  # noqa: SIM115
extra = []
for d in sys.argv[2:]:
    path = os.path.join(d, "shard.bin")
    with open(path, "wb") as fh:
        fh.write(b"y")
    extra.append(open(path, "rb"))  # noqa: SIM115
print("READY", flush=True)
chunk = os.urandom(1 << 20)
while True:
    ckpt.seek(0)
    ckpt.write(chunk)
    ckpt.flush()
    os.fsync(ckpt.fileno())
    log.write("step\n")
    log.flush()
    time.sleep(0.05)
