"""A model server that prints nothing: a single-threaded HTTP server whose
handler runs the model on each request's input (``POST /predict``), its forward
taking ``--forward-s`` of device time (``device_time.DeviceTime``). Its steps
are the requests it answers; clients come from elsewhere (``server_client.py``).
Ground truth (each answered request) goes to the file named by ``--truth``.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import torch
from aitop.demo.truth import Truth
from device_time import DeviceTime
from torch import nn


def serve(port_file: Path, forward_s: float, truth: Truth, duration_s: float) -> None:
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), DeviceTime(forward_s, 0.0),
                          nn.Linear(256, 8)).eval()

    class Predict(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            x = torch.tensor(json.loads(body), dtype=torch.float32).reshape(-1, 64)
            with torch.no_grad():
                y = model(x)
            out = json.dumps(y.argmax(dim=1).tolist()).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            truth.steps += 1
            truth.maybe_write(force=True)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a quiet server: no access log

    server = HTTPServer(("127.0.0.1", 0), Predict)
    port_file.write_text(str(server.server_address[1]))
    threading.Timer(duration_s, server.shutdown).start()
    server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", type=Path, required=True)
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--forward-s", type=float, default=0.25)
    args = parser.parse_args()
    torch.set_num_threads(1)
    serve(args.port_file, args.forward_s, Truth(args.truth), args.duration)
