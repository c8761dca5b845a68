"""A small notes server over MCP stdio, standard library only, packaged by the atlas tests as a wheel per release
(tests/atlas_index.py) and installed by the atlas from a registry on 127.0.0.1. RELEASE (written into the wheel)
decides its behaviour, so releases differ as real ones do:

- 1.0: `add_note` appends a line to notes.jsonl (a re-issue appends again: a duplicate) while declaring
  idempotentHint=true (a contradiction); `clear_notes` (no arguments) empties the file; `tag_note` needs an id.
- 2.0: `add_note` refuses a text already there, answering "Error: note already exists" with isError false (a false
  failure), so its idempotentHint is now true.
- 3.0: dies at start (an untestable release).

NOTES_EXTRA_TOOL names one more tool (any text: a hostile name), which takes no arguments and kills the server
when called.

Its data file is the first argument."""

import json
import os
import sys

RELEASE = "1.0"

TOOLS = [
    {"name": "add_note", "description": "Add a note.", "annotations": {"idempotentHint": True, "readOnlyHint": False},
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "clear_notes", "description": "Remove every note.", "annotations": {"destructiveHint": True},
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "tag_note", "description": "Tag a note.",
     "inputSchema": {"type": "object", "properties": {"id": {"type": "integer"}, "tag": {"type": "string"}},
                     "required": ["id", "tag"]}},
    {"name": "list_notes", "description": "List the notes.", "annotations": {"readOnlyHint": True},
     "inputSchema": {"type": "object", "properties": {}}},
]

if os.environ.get("NOTES_EXTRA_TOOL"):
    TOOLS.append({"name": os.environ["NOTES_EXTRA_TOOL"], "description": "Dies.",
                  "inputSchema": {"type": "object", "properties": {}}})


def _notes(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []


def call(path, name, args):
    notes = _notes(path)
    if name == "list_notes":
        return json.dumps(notes)
    if name == "clear_notes":
        had = len(notes)
        open(path, "w", encoding="utf-8").close()
        return f"removed {had} notes"
    if name == "add_note":
        if RELEASE != "1.0" and any(n["text"] == args["text"] for n in notes):
            return "Error: note already exists"
        note = {"id": len(notes) + 1, "text": args["text"]}
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(note) + "\n")
        return json.dumps(note)
    if name == "tag_note":
        for n in notes:
            if n["id"] == args["id"]:
                n.setdefault("tags", []).append(args["tag"])
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(n) + "\n" for n in notes)
        return "tagged"
    os._exit(5)  # the extra tool: the server dies under the call


def main():
    if RELEASE == "3.0":
        print("notes: cannot open the store", file=sys.stderr)
        sys.exit(3)
    path = os.path.abspath(sys.argv[1])
    for line in sys.stdin:
        msg = json.loads(line)
        if "id" not in msg:
            continue
        method, params = msg.get("method"), msg.get("params") or {}
        if method == "initialize":
            result = {"protocolVersion": params.get("protocolVersion", "2025-06-18"), "capabilities": {"tools": {}},
                      "serverInfo": {"name": "notes", "version": RELEASE}}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            text = call(path, params["name"], params.get("arguments") or {})
            result = {"content": [{"type": "text", "text": text}], "isError": False}
        else:
            result = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
