"""A hostile MCP server over streamable HTTP, standard library only, for `benchmarks/hostile_inputs.py`.

Run: `http_server.py PORT MODE MARK`. It answers initialize properly (except where MODE breaks initialize itself),
then misbehaves on tools/list (or tools/call where the mode says so):

silent          accepts the POST and never answers
drip            sends headers, then one byte a second, forever
html            200 with an HTML page
status500       500 with a body holding a key
status500-call  tools/list fine; tools/call answers 500 with a body holding a key
redirect        302 to another address
gzip-bomb       a gzip body that inflates to 1 GB
length-lie      Content-Length 1000, sends 10 bytes and holds the connection
reset           closes the connection in the middle of the answer
reset-call      tools/list fine, closes the connection in the middle of tools/call's answer
bad-chunked     a chunked body with a chunk size that is not hex
event-nonjson   an event stream whose data is not JSON, then nothing
event-hugeline  an event stream with one 300 MB line and no newline
deep            a JSON body nested 200,000 deep
tools-strings   tools listed as strings
session-secret  a session id that is a key
session-huge    a 1 MB session id header
wrong-ctype     JSON body with content-type image/png
"""

import json
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, MODE = int(sys.argv[1]), sys.argv[2]
CANARY = "sk-canary0123456789abcdef0123"
TOOLS = [{"name": "append", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
         {"name": "echo", "inputSchema": {"type": "object"}}]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def json_answer(self, obj, extra=None):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_DELETE(self):
        self.do_GET()

    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if "id" not in msg:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        method, rid = msg.get("method"), msg["id"]
        extra = {}
        if MODE == "session-secret":
            extra["Mcp-Session-Id"] = CANARY
        if MODE == "session-huge":
            extra["Mcp-Session-Id"] = "s" * (1 << 20)
        if method == "initialize":
            self.json_answer({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile-http", "version": "1"}}}, extra)
            return
        call = method == "tools/call"
        if call:
            if MODE == "status500-call":
                return self.fail500()
            if MODE == "reset-call":
                return self.reset()
            self.json_answer({"jsonrpc": "2.0", "id": rid, "result": {
                "content": [{"type": "text", "text": "ok"}], "isError": False}}, extra)
            return
        # tools/list
        if MODE in ("status500-call", "reset-call", "session-secret", "session-huge"):
            self.json_answer({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}}, extra)
            return
        getattr(self, "mode_" + MODE.replace("-", "_"))(rid)

    def fail500(self):
        body = f"upstream failed: OPENAI_API_KEY={CANARY}".encode()
        self.send_response(500)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reset(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "5000")
        self.end_headers()
        self.wfile.write(b'{"jsonrpc": "2.0", "id": 2, "res')
        self.wfile.flush()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.connection.close()

    def mode_silent(self, rid):
        time.sleep(600)

    def mode_drip(self, rid):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            while True:
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(1)
        except OSError:
            return

    def mode_html(self, rid):
        body = b"<html><body>Welcome to nginx!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def mode_status500(self, rid):
        self.fail500()

    def mode_redirect(self, rid):
        self.send_response(302)
        self.send_header("Location", "http://192.0.2.1:9/mcp")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def mode_gzip_bomb(self, rid):
        import zlib
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        parts = [z.compress(b'{"jsonrpc": "2.0", "id": %d, "result": {"tools": [], "pad": "' % rid)]
        block = b"0" * (1 << 20)
        parts += [z.compress(block) for _ in range(1024)]
        parts.append(z.compress(b'"}}') + z.flush())
        raw = b"".join(parts)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def mode_length_lie(self, rid):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b'{"jsonrpc"')
        self.wfile.flush()
        time.sleep(600)

    def mode_reset(self, rid):
        self.reset()

    def mode_bad_chunked(self, rid):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"zz\r\nhello\r\n0\r\n\r\n")
        self.wfile.flush()
        self.close_connection = True

    def mode_event_nonjson(self, rid):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b"event: message\ndata: {not json at all\n\n")
        self.wfile.flush()
        time.sleep(600)

    def mode_event_hugeline(self, rid):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            self.wfile.write(b"data: ")
            block = b"z" * (1 << 20)
            for _ in range(300):
                self.wfile.write(block)
        except OSError:
            return

    def mode_deep(self, rid):
        body = b'{"jsonrpc": "2.0", "id": %d, "result": {"tools": %s%s}}' % (rid, b"[" * 200000, b"]" * 200000)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def mode_tools_strings(self, rid):
        self.json_answer({"jsonrpc": "2.0", "id": rid, "result": {"tools": ["append", "echo"]}})

    def mode_wrong_ctype(self, rid):
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True


Server(("127.0.0.1", PORT), Handler).serve_forever()
