#!/usr/bin/python3
"""fake_llm.py - an OpenAI-compatible chat-completions server on loopback, for tests.

A real HTTP/1.1 server (keep-alive, Content-Length framing) whose answers are chosen by the
requested model name, or by a behaviour set through the control endpoint, so that a test
can make every path of a client happen for real.

Run:  /usr/bin/python3 fake_llm.py --port-file PATH --log-file PATH
It binds 127.0.0.1 port 0, writes the chosen port to --port-file (atomically: the file
appears complete or not at all) and prints "port N" on stdout. SIGTERM stops it.

Behaviours (the model name, or POST /control {"behaviour": "..."}; "" clears the control):
  ok (or any other name)  a normal answer with usage; when the messages before the last have
                          "## heading" lines (a summarizer's prompt), the answer has those
                          sections
  slow:MS                 waits MS milliseconds, then answers normally
  hold[:MS]               waits until POST /release lets it go (or MS milliseconds, 60000
                          by default), then answers normally. /release {"count": N} lets N
                          held (or later) requests go (1 by default); setting the hold again
                          takes back what was let go and not used
  status:CODE:K[:ra=S][:ram=MS]
                          the first K requests of this behaviour get HTTP CODE (with
                          Retry-After: S and/or retry-after-ms: MS), later ones a normal
                          answer; K may be "all"
  garbage                 200 with a body that is not JSON
  empty / blank           200 with "" / white-space content
  nochoices               200 with "choices": []
  nullcontent             200 with "content": null
  huge:BYTES              200 whose content is BYTES bytes long
  long                    200 whose content is every message's text, three times
  echo                    200 whose content is the last message's text
  cut                     200 announcing 4096 bytes, sending 100, then closing the connection

Every chat request is recorded before any byte of the answer is sent: one JSON line per
request in --log-file ({"n", "path", "ts" (server's monotonic seconds), "client_port" (the
same port means the same connection), "headers" (lower-case names), "body" (parsed JSON, or
null and "raw" when not JSON), "behaviour"}), also served as a JSON array by GET /requests.
"""

import argparse
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 64 * 1024 * 1024


class State:
    def __init__(self, log_path):
        self.lock = threading.Lock()
        self.counts = {}
        self.control = ""
        self.released = threading.Semaphore(0)
        self.requests = []
        self.log = open(log_path, "a", encoding="utf-8")

    def record(self, entry):
        with self.lock:
            entry["n"] = len(self.requests) + 1
            self.requests.append(entry)
            self.log.write(json.dumps(entry, ensure_ascii=False) + "\n")
            self.log.flush()

    def bump(self, behaviour):
        with self.lock:
            self.counts[behaviour] = self.counts.get(behaviour, 0) + 1
            return self.counts[behaviour]


def message_texts(body):
    texts = []
    if isinstance(body, dict) and isinstance(body.get("messages"), list):
        for m in body["messages"]:
            if isinstance(m, dict) and isinstance(m.get("content"), str):
                texts.append(m["content"])
    return texts


def completion(content, body, model):
    prompt = sum(len(t) for t in message_texts(body))
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": max(1, prompt // 4),
                  "completion_tokens": max(1, len(content or "") // 4),
                  "total_tokens": max(1, prompt // 4) + max(1, len(content or "") // 4)},
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-llm/1"
    # Headers and body go out in separate writes; without this, Nagle's algorithm and the
    # client's delayed ACK add ~40 ms to every answer on a kept-alive connection.
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        pass  # quiet: the request log is the record

    def send_bytes(self, status, payload, headers=(), content_type="application/json"):
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def send_json(self, status, obj, headers=()):
        self.send_bytes(status, json.dumps(obj, ensure_ascii=False).encode("utf-8"), headers)

    def read_body(self):
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit() or int(length) > MAX_BODY:
            return None
        return self.rfile.read(int(length))

    def do_GET(self):
        state = self.server.state
        if self.path == "/requests":
            with state.lock:
                snapshot = list(state.requests)
            self.send_json(200, snapshot)
        else:
            self.send_json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        state = self.server.state
        raw = self.read_body()
        if raw is None:
            self.send_json(411, {"error": {"message": "Content-Length required"}})
            self.close_connection = True
            return
        if self.path == "/control":
            try:
                state.control = json.loads(raw.decode("utf-8")).get("behaviour", "")
            except (ValueError, AttributeError):
                self.send_json(400, {"error": {"message": "bad control body"}})
                return
            if state.control.startswith("hold"):
                state.released = threading.Semaphore(0)
            self.send_json(200, {"behaviour": state.control})
            return
        if self.path == "/release":
            try:
                count = int(json.loads(raw.decode("utf-8") or "{}").get("count", 1))
            except (ValueError, AttributeError):
                self.send_json(400, {"error": {"message": "bad release body"}})
                return
            state.released.release(count)
            self.send_json(200, {"behaviour": state.control})
            return
        if not self.path.endswith("/chat/completions"):
            self.send_json(404, {"error": {"message": "not found"}})
            return

        try:
            body = json.loads(raw.decode("utf-8"))
        except ValueError:
            body = None
        model = body.get("model", "") if isinstance(body, dict) else ""
        behaviour = state.control or (model if isinstance(model, str) else "")
        entry = {"path": self.path, "ts": time.monotonic(),
                 "client_port": self.client_address[1],
                 "headers": {k.lower(): v for k, v in self.headers.items()},
                 "body": body, "behaviour": behaviour}
        if body is None:
            entry["raw"] = raw[:4096].decode("utf-8", "replace")
        state.record(entry)
        self.answer(behaviour, body, model)

    def answer(self, behaviour, body, model):
        parts = behaviour.split(":")
        kind = parts[0]
        texts = message_texts(body)
        if kind == "slow":
            time.sleep(int(parts[1]) / 1000.0)
        elif kind == "hold":
            self.server.state.released.acquire(
                timeout=int(parts[1]) / 1000.0 if len(parts) > 1 else 60.0)
        elif kind == "status":
            code, limit = int(parts[1]), parts[2]
            n = self.server.state.bump(behaviour)
            if limit == "all" or n <= int(limit):
                headers = []
                for p in parts[3:]:
                    if p.startswith("ra="):
                        headers.append(("Retry-After", p[3:]))
                    elif p.startswith("ram="):
                        headers.append(("retry-after-ms", p[4:]))
                self.send_json(code, {"error": {"message": "fake failure %d of %s" % (n, limit),
                                                 "type": "fake"}}, headers)
                return
        elif kind == "garbage":
            self.send_bytes(200, b'{"choices": [{"message": {"content": "trunc')
            return
        elif kind in ("empty", "blank"):
            self.send_json(200, completion("" if kind == "empty" else "  \n\t ", body, model))
            return
        elif kind == "nochoices":
            self.send_json(200, {"id": "x", "choices": []})
            return
        elif kind == "nullcontent":
            self.send_json(200, completion(None, body, model))
            return
        elif kind == "huge":
            self.send_json(200, completion("x" * int(parts[1]), body, model))
            return
        elif kind == "long":
            self.send_json(200, completion("\n".join(texts) * 3, body, model))
            return
        elif kind == "echo":
            self.send_json(200, completion(texts[-1] if texts else "", body, model))
            return
        elif kind == "cut":
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "4096")
                self.end_headers()
                self.wfile.write(b'{"choices": [' + b" " * 87)
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.close_connection = True
            return
        last = texts[-1] if texts else ""
        answer = "Summary of %d messages. Last: %s" % (len(texts), last[:200])
        # A summarizer's prompt names its sections on "## heading" lines: answer under them.
        headings = [line for t in texts[:-1] for line in t.split("\n") if line.startswith("## ")]
        if headings:
            answer = "\n".join("%s\n- %s" % (h, "fake summary" if i else answer.replace("\n", " "))
                               for i, h in enumerate(headings))
        self.send_json(200, completion(answer, body, model))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log-file", required=True)
    args = ap.parse_args()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.state = State(args.log_file)
    port = server.server_address[1]
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.rename(tmp, args.port_file)
    print("port %d" % port, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
