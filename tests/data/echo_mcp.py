"""A minimal MCP server over stdio, standard library only (it starts in milliseconds): `echo` (a read), `append`
(appends its text to notes.txt in its folder: a re-issue appends again) and `refuse` (answers isError), or the tool list given as JSON in
ECHO_TOOLS (for tests of what a server may list). For tests of the world surfaces."""

import json
import os
import subprocess
import sys
import time

if os.environ.get("ECHO_ESCAPE"):  # a server that tries to outlive its runner: setsid'd and detached children,
    secs = os.environ["ECHO_ESCAPE"]  # sleeping a number of seconds that marks them (found by their command line)
    subprocess.Popen(["sleep", secs], start_new_session=True)
    subprocess.Popen(["sh", "-c", f"sleep {secs} & exit 0"], start_new_session=True).wait()

TOOLS = json.loads(os.environ.get("ECHO_TOOLS") or "null") or [
    {"name": "echo", "description": "Echo the text back.", "inputSchema": {"type": "object", "properties": {
        "text": {"type": "string"}}}},
    {"name": "append", "description": "Append the text to notes.txt.", "inputSchema": {"type": "object",
     "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "refuse", "description": "Refuse, with isError.", "inputSchema": {"type": "object"}}]

BAD = os.environ.get("ECHO_BAD", "")  # a malformed answer, for the hostile-answer tests

if BAD == "tools-change":  # from its second start on (counted in the folder it is given), no `append`
    with open(os.path.join(sys.argv[1], "echo-starts"), "a+", encoding="utf-8") as fh:
        fh.write("start\n")
        fh.seek(0)
        if len(fh.readlines()) >= 2:
            TOOLS = [t for t in TOOLS if t["name"] != "append"]


def bad(method, result):
    """The answer as the hostile server gives it (None: send the normal one)."""
    if BAD == "info-string" and method == "initialize":
        return dict(result, serverInfo="echo 1.0")
    if BAD == "tools-strings" and method == "tools/list":
        return {"tools": ["echo", "append"]}
    if BAD == "tools-number" and method == "tools/list":
        return {"tools": 5}
    if BAD == "annotations" and method == "tools/list":
        return {"tools": [dict(t, annotations="yes") for t in result["tools"]]}
    if BAD == "annotation-values" and method == "tools/list":
        return {"tools": [dict(t, annotations={"readOnlyHint": "no", "idempotentHint": [1]}) for t in result["tools"]]}
    if BAD == "schema" and method == "tools/list":
        return {"tools": [dict(t, inputSchema={"type": 5, "required": "text"}) for t in result["tools"]]}
    if BAD == "content" and method == "tools/call":
        return {"content": "appended", "isError": "no"}
    if BAD == "result-list" and method == "tools/call":
        return [1, 2]
    if BAD == "nan-answer" and method == "tools/call":  # json.dumps writes NaN, which JSON does not have
        return dict(result, structuredContent={"n": float("nan")})
    if BAD == "surrogate-answer" and method == "tools/call":  # "\ud800": text no UTF-8 writer can write
        return dict(result, content=[{"type": "text", "text": "\ud800"}])
    if BAD == "deep-struct" and method == "tools/call":
        deep = []
        for _ in range(300):
            deep = [deep]
        return dict(result, structuredContent={"v": deep})
    if BAD == "info-secret" and method == "initialize":  # a credential in what the server calls itself
        return dict(result, serverInfo={"name": "echo sk-canary0123456789abcdef0123", "version": "1"})
    return result


for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "echo", "version": "0.0.1"}}
    elif method == "tools/list":
        time.sleep(float(os.environ.get("ECHO_LIST_SLEEP") or 0))  # a server that initializes, then hangs
        result = {"tools": TOOLS}
    elif method == "tools/call":
        text = str((msg["params"].get("arguments") or {}).get("text", ""))
        time.sleep(float(os.environ.get("ECHO_SLEEP") or 0))
        if msg["params"].get("name") == "refuse":
            print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "content": [{"type": "text", "text": "refused"}], "isError": True}}), flush=True)
            continue
        if msg["params"].get("name") == "append":
            with open("notes.txt", "a", encoding="utf-8") as fh:
                fh.write(text + "\n")
            text = "appended"
        result = {"content": [{"type": "text", "text": text}], "isError": False}
        if os.environ.get("ECHO_STRUCTURED"):  # a server that also answers structuredContent
            result["structuredContent"] = {"echoed": text}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no method"}}),
              flush=True)
        continue
    if BAD.startswith("error-code-") and method == "tools/call":
        code = {"error-code-string": "oops", "error-code-null": None}[BAD]
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": code, "message": 7}}), flush=True)
        continue
    if BAD == "deep" and method in ("tools/list", "tools/call"):
        sys.stdout.write('{"jsonrpc": "2.0", "id": %d, "result": {"tools": %s%s}}\n'
                         % (msg["id"], "[" * 200000, "]" * 200000))
        sys.stdout.flush()
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": bad(method, result)}), flush=True)
