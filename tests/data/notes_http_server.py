"""A small MCP server offering only streamable HTTP (the official SDK's MCPServer), for the HTTP world test: notes
kept as files in a folder. `append_note` appends (a re-issue appends again); `write_note` writes (a re-issue is
harmless). Run: python notes_http_server.py ROOT PORT"""

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

ROOT = Path(sys.argv[1])
server = MCPServer("notes-http", version="0.1.0")


@server.tool()
def append_note(name: str, text: str) -> str:
    """Append text to a note."""
    with open(ROOT / name, "a", encoding="utf-8") as fh:
        fh.write(text)
    return f"appended to {name}"


@server.tool()
def write_note(name: str, text: str) -> str:
    """Write a note, replacing it."""
    (ROOT / name).write_text(text, encoding="utf-8")
    return f"wrote {name}"


@server.tool()
def read_note(name: str) -> str:
    """Read a note."""
    return (ROOT / name).read_text(encoding="utf-8")


if __name__ == "__main__":
    import anyio

    anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=int(sys.argv[2])))
