"""A hostile MCP server over streamable HTTP, standard library only: it initializes properly, then answers
tools/list with an event stream that never ends ("endless"), a 300 MB body ("huge") or a chunked body whose chunk
size is not a number ("bad-chunked"). Run: hostile_http.py PORT MODE"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, MODE = int(sys.argv[1]), sys.argv[2]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if "id" not in msg:
            self.send_response(202)
            self.end_headers()
            return
        if msg.get("method") == "initialize":
            body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"}}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        if MODE == "endless":
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b": still here\n\n")
                    self.wfile.flush()
                    time.sleep(0.01)
            except OSError:
                return
        if MODE == "bad-chunked":
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"zz\r\n{}\r\n0\r\n\r\n")
            return
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            self.wfile.write(b'{"jsonrpc": "2.0", "id": %d, "result": {"tools": [], "pad": "' % msg["id"])
            block = b"x" * (1 << 20)
            for _ in range(300):
                self.wfile.write(block)
            self.wfile.write(b'"}}')
        except OSError:
            return


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
