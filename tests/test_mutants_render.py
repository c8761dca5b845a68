"""What mutmut found undefended in `scorecard/render.py` (issue 49, benchmarks/mutants.md, "The real-server
modules"): the terminal table `aft-bench scorecard` prints, the Markdown and JSON files `--out` writes, the lines
`--against` prints for two releases, and the `--fail-on` gate's lines. Each test renders real `Scorecard` objects
(`scorecard/card.py`), round-tripped through JSON as the command does, and asserts the whole text a user reads."""

from __future__ import annotations

import copy

import json
from pathlib import Path
from typing import Any

import pytest

from aft_bench.scorecard.card import Outcome, Scorecard, ToolCard
from aft_bench.scorecard.render import FAIL_ON, HOW, compare, failures, markdown, rows, table, to_json

PHRASES = ("already exists", "status | failed")  # the second as a server that answers in Markdown tables shows it
ALL_THREE = {"readOnlyHint": False, "idempotentHint": True, "destructiveHint": False}
ADDED = {"notes": {"added": ["n2"], "removed": [], "changed": []}}
ONCE_NOT_SENT = "state: the effect is there once; the re-issue was not sent"
CHANGED_NOT_SENT = "state: the call changed it; the re-issue was not sent"
PIPE_ANSWER = "| status | failed |\n| reason | a note titled b already exists |"


def _said(text: str, error: bool = False, *more: str) -> dict[str, Any]:
    """A server's answer: its text blocks (and an image a client does not read as text)."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": t} for t in (text, *more)]
    blocks.append({"type": "image", "data": "aGk=", "mimeType": "image/png"})
    return {"content": blocks, **({"isError": True} if error else {})}


def _out(treatment: str, cls: str, signal: str, *, realized: int | None = None,
         reissue: dict[str, Any] | None = None, changes: dict[str, Any] | None = None) -> Outcome:
    return Outcome(treatment, cls, realized, _said("ok"), reissue, reissue, changes or {}, None, signal)


def _as_written(card: Scorecard) -> dict[str, Any]:
    """The card as `aft-bench scorecard` renders it: its dict through JSON (tuples become lists)."""
    return json.loads(json.dumps(card.to_dict()))


def new_card() -> dict[str, Any]:
    """Release 2.0.0 of a notes server: every class, declared, contradicted and undeclared annotations, a tool
    measured by one treatment only, one with no bare outcome, two examples of one tool, two untested writes."""
    tools = (
        ToolCard("add_note", 0, {"title": "a"}, "adds a note", dict(ALL_THREE), {}, (
            _out("bare", "duplicate", "state: the effect is there 2 times", realized=2,
                 reissue=_said("added  note", False, "n2\n"), changes=ADDED),
            _out("key", "safe", ONCE_NOT_SENT, realized=1),
            _out("verify", "safe", ONCE_NOT_SENT, realized=1)),
            ("idempotentHint=true, but the re-issue made a second effect",), ()),
        ToolCard("add_note", 1, {"title": "b"}, "adds a titled note", dict(ALL_THREE), {}, (
            _out("bare", "false_failure", 'state: the effect is there once; answer: text "status | failed"',
                 realized=1, reissue=_said(PIPE_ANSWER)),
            _out("key", "safe", ONCE_NOT_SENT, realized=1),
            _out("verify", "safe", ONCE_NOT_SENT, realized=1)),
            (), ()),
        ToolCard("delete_note", 0, {"id": "n1"}, "", {}, {}, (
            _out("bare", "silent_success", "state: the call changed it; answer: success", reissue=_said("deleted"),
                 changes={"tags": {"added": [], "removed": ["t1"], "changed": []}, "notes": ADDED["notes"]}),),
            (), ("readOnlyHint", "idempotentHint")),
        ToolCard("echo", 0, {"text": "hi"}, "a read", {"readOnlyHint": True}, {}, (
            _out("bare", "no_effect", "state: the call changed nothing", reissue=_said("hi")),
            _out("key", "no_effect", "state: the call changed nothing", reissue=_said("hi")),
            _out("verify", "no_effect", "state: the call changed nothing", reissue=_said("hi"))),
            (), ("idempotentHint",)),
        ToolCard("purge", 0, {}, "", {"destructiveHint": True}, {}, (
            _out("key", "safe", CHANGED_NOT_SENT),), (), ()),
        ToolCard("rename_note", 0, {"id": "n1", "title": "c"}, "", {"readOnlyHint": True, "idempotentHint": False},
                 {}, (_out("bare", "safe", CHANGED_NOT_SENT), _out("key", "safe", CHANGED_NOT_SENT),
                      _out("verify", "safe", CHANGED_NOT_SENT)),
                 ("idempotentHint=false, but the re-issue made no second effect",
                  "readOnlyHint=true, but the call changed the state"), ()),
        ToolCard("tag_note", 0, {"id": "n1", "tag": "x"}, "",
                 {"destructiveHint": False, "idempotentHint": False, "readOnlyHint": False}, {},
                 (_out("bare", "unmeasured", ""),), (), ()),
    )
    return _as_written(Scorecard("notes", "notes-mcp", "2.0.0", {"name": "notes-server", "version": "2.0.0-rc1"},
                                 "2025-06-18", tools, ("archive_note", "export_notes"), "2.0.0", PHRASES))


def old_card() -> dict[str, Any]:
    """Release 1.4.0 of the same world: classes that changed each way, a tool since removed (`legacy_export`), one
    since added (`purge`), contradictions that appeared, vanished and stayed, treatments measured then or now only."""
    tools = (
        ToolCard("add_note", 0, {"title": "a"}, "adds a note", dict(ALL_THREE), {}, (
            _out("bare", "silent_success", "state: the effect is there once; answer: success", realized=1,
                 reissue=_said("added note n1")),
            _out("key", "duplicate", "state: the effect is there 2 times", realized=2,
                 reissue=_said("added note n2"), changes=ADDED),
            _out("verify", "safe", ONCE_NOT_SENT, realized=1)),
            (), ()),
        ToolCard("add_note", 1, {"title": "b"}, "adds a titled note", dict(ALL_THREE), {}, (
            _out("bare", "false_failure", 'state: the effect is there once; answer: text "status | failed"',
                 realized=1, reissue=_said(PIPE_ANSWER)),
            _out("key", "safe", ONCE_NOT_SENT, realized=1),
            _out("verify", "safe", ONCE_NOT_SENT, realized=1)),
            (), ()),
        ToolCard("delete_note", 0, {"id": "n1"}, "", {}, {}, (
            _out("bare", "duplicate", "state: the re-issue changed it again", reissue=_said("no note n1", True),
                 changes={"notes": {"added": [], "removed": ["n0"], "changed": []}}),
            _out("key", "safe", CHANGED_NOT_SENT)),
            (), ("readOnlyHint", "idempotentHint")),
        ToolCard("echo", 0, {"text": "hi"}, "a read", {"readOnlyHint": True}, {}, (
            _out("bare", "no_effect", "state: the call changed nothing", reissue=_said("hi")),
            _out("key", "no_effect", "state: the call changed nothing", reissue=_said("hi")),
            _out("verify", "no_effect", "state: the call changed nothing", reissue=_said("hi"))),
            (), ("idempotentHint",)),
        ToolCard("legacy_export", 0, {}, "", {}, {}, (
            _out("bare", "silent_success", "state: the call changed it; answer: success",
                 reissue=_said("exported")),), (), ("readOnlyHint", "idempotentHint")),
        ToolCard("rename_note", 0, {"id": "n1", "title": "c"}, "", {"readOnlyHint": True, "idempotentHint": False},
                 {}, (_out("bare", "safe", CHANGED_NOT_SENT),),
                 ("idempotentHint=false, but the re-issue made no second effect",
                  "readOnlyHint=true, but the call changed the state"), ()),
        ToolCard("tag_note", 0, {"id": "n1", "tag": "x"}, "",
                 {"readOnlyHint": False, "idempotentHint": False, "destructiveHint": False}, {}, (
                     _out("bare", "silent_success", "state: the call changed it; answer: success",
                          reissue=_said("tagged")),),
                 ("idempotentHint=false, but the re-issue made no second effect",), ()),
    )
    return _as_written(Scorecard("notes", "notes-mcp", "1.4.0", {"name": "notes-server", "version": "1.4.0"},
                                 "2025-03-26", tools, ("archive_note",), "1.4.0", PHRASES))


def clean_card() -> dict[str, Any]:
    """A server a gate passes on anything: one tool, every measured annotation declared and true to the measure."""
    return _as_written(Scorecard("echo", "echo-mcp", "0.1.0", {"name": "echo", "version": "0.1.0"}, "2025-06-18", (
        ToolCard("append", 0, {"text": "x"}, "", {"readOnlyHint": False, "idempotentHint": True}, {}, (
            _out("bare", "safe", CHANGED_NOT_SENT),)),), (), "0.1.0"))


def tiny_card(installed: str | None) -> dict[str, Any]:
    """One tool measured bare only; `installed` as read from the install (None: it could not be read)."""
    return _as_written(Scorecard("echo", "echo-mcp", "0.1.0", {"name": "echo", "version": "0.1"}, None, (
        ToolCard("append", 0, {"text": "x"}, "appends", {"readOnlyHint": False, "idempotentHint": False},
                 {"effect": "append"}, (Outcome("bare", "duplicate", None, {"content": []},
                                                {"content": [{"type": "text", "text": "ok"}]}, None,
                                                {"files": {"changed": ["notes.txt"]}}, None,
                                                "state: the re-issue changed it again"),)),), (), installed))


# --- the terminal table ------------------------------------------------------------------------------------------

NEW_TABLE = """\
notes-mcp 2.0.0 (installed 2.0.0, server says notes-server 2.0.0-rc1, protocol 2025-06-18): world notes

tool                   re-issued bare   with key         verify           annotations
add_note #1            DUPLICATE        safe             safe             readOnly=false idempotent=true destructive=false\
  <- idempotentHint=true, but the re-issue made a second effect
                       re-issue answered 'added note n2'; it changed notes; decided by state: the effect is there 2 times
add_note #2            false failure    safe             safe             readOnly=false idempotent=true destructive=false
                       re-issue answered '| status | failed | | reason | a note titled b already exist...'; it changed\
 nothing; decided by state: the effect is there once; answer: text "status | failed"
delete_note            silent success   -                -                none
                       re-issue answered 'deleted'; it changed notes, tags; decided by state: the call changed it;\
 answer: success; undeclared: readOnlyHint, idempotentHint
echo                   no effect        no effect        no effect        readOnly=true
                       re-issue answered 'hi'; it changed nothing; decided by state: the call changed nothing;\
 undeclared: idempotentHint
purge                  -                safe             -                destructive=true
                       re-issue answered (not sent to the server); it changed nothing; decided by -
rename_note            safe             safe             safe             readOnly=true idempotent=false\
  <- idempotentHint=false, but the re-issue made no second effect; readOnlyHint=true, but the call changed the state
                       re-issue answered (not sent to the server); it changed nothing; decided by state: the call\
 changed it; the re-issue was not sent
tag_note               unmeasured       -                -                readOnly=false idempotent=false destructive=false
                       re-issue answered (not sent to the server); it changed nothing; decided by -
no example (not measured): archive_note, export_notes"""


def test_the_table_shows_every_class_its_evidence_and_the_annotations_verdict() -> None:
    """The table `aft-bench scorecard` prints would misname a class, lose a contradiction or an undeclared hint."""
    assert table(new_card()) == NEW_TABLE


@pytest.mark.parametrize("installed, said", [
    ("0.1.0", "installed 0.1.0, "),
    (None, "the installed version could not be read from the install, "),
    ("absent", ""),  # a card written before the install was read has no `installed` at all
])
def test_the_table_head_says_what_the_install_said(installed: str | None, said: str) -> None:
    """The table's first line would claim an installed version nobody read, or hide that it could not be read."""
    card = tiny_card(None if installed == "absent" else installed)
    if installed == "absent":
        del card["installed"]
    assert table(card) == (
        f"echo-mcp 0.1.0 ({said}server says echo 0.1, protocol not stated): world echo\n\n"
        "tool                   re-issued bare   with key         verify           annotations\n"
        "append                 DUPLICATE        -                -                readOnly=false idempotent=false\n"
        "                       re-issue answered 'ok'; it changed files; decided by state: the re-issue changed it "
        "again")


# --- the Markdown file -------------------------------------------------------------------------------------------

GATEWAY = ("Each tool's example call had its answer lost at the gateway after the server answered, then was "
           "re-issued with byte-identical arguments (bare), with the gateway's idempotency key (key), or after a check "
           f"of the real state (verify). {HOW}")
MD_HEAD = ("| tool | bare re-issue | with key | verify | signal | re-issue answered | annotations | disagrees | "
           "undeclared |\n|---|---|---|---|---|---|---|---|---|\n")

NEW_MARKDOWN = f"""\
# Scorecard: notes-mcp 2.0.0

World `notes`; installed 2.0.0; the server says it is notes-server 2.0.0-rc1 (protocol 2025-06-18). {GATEWAY}\
 Failure phrases: "already exists", "status | failed".

{MD_HEAD}\
| `add_note #1` | DUPLICATE | safe | safe | state: the effect is there 2 times | 'added note n2' |\
 readOnly=false idempotent=true destructive=false | idempotentHint=true, but the re-issue made a second effect | - |
| `add_note #2` | false failure | safe | safe | state: the effect is there once; answer: text "status / failed" |\
 '/ status / failed / / reason / a note titled b already exist...' | readOnly=false idempotent=true\
 destructive=false | no | - |
| `delete_note` | silent success | - | - | state: the call changed it; answer: success | 'deleted' | none | no |\
 readOnlyHint, idempotentHint |
| `echo` | no effect | no effect | no effect | state: the call changed nothing | 'hi' | readOnly=true | no |\
 idempotentHint |
| `purge` | - | safe | - |  | (not sent to the server) | destructive=true | no | - |
| `rename_note` | safe | safe | safe | state: the call changed it; the re-issue was not sent |\
 (not sent to the server) | readOnly=true idempotent=false | idempotentHint=false, but the re-issue made no second\
 effect; readOnlyHint=true, but the call changed the state | - |
| `tag_note` | unmeasured | - | - |  | (not sent to the server) | readOnly=false idempotent=false\
 destructive=false | no | - |

Writing tools with no example (not measured): archive_note, export_notes.
"""


def test_the_markdown_card_has_one_table_row_per_example_and_no_pipe_from_a_server_breaks_it() -> None:
    """The .md file `--out` writes would misstate a class, or a `|` in an answer or phrase would split its row."""
    md = markdown(new_card())
    assert md == NEW_MARKDOWN
    rows_of = [line for line in md.splitlines() if line.startswith("| `")]
    assert [line.count(" | ") for line in rows_of] == [8] * 7  # nine cells each, whatever the server answered


@pytest.mark.parametrize("installed, said", [
    ("0.1.0", "installed 0.1.0"),
    (None, "the installed version could not be read from the install"),
    ("absent", "the install was not read"),
])
def test_the_markdown_says_what_the_install_said_and_no_phrases_when_there_were_none(installed: str | None,
                                                                                      said: str) -> None:
    """The Markdown card would claim an install version nobody read, or list failure phrases the world has none of."""
    card = tiny_card(None if installed == "absent" else installed)
    if installed == "absent":
        del card["installed"]
    assert markdown(card) == (
        "# Scorecard: echo-mcp 0.1.0\n\n"
        f"World `echo`; {said}; the server says it is echo 0.1 (protocol not stated). {GATEWAY}\n\n"
        f"{MD_HEAD}"
        "| `append` | DUPLICATE | - | - | state: the re-issue changed it again | 'ok' | readOnly=false "
        "idempotent=false | no | - |\n")


# --- the JSON file -----------------------------------------------------------------------------------------------

TINY_JSON = """\
{
  "failure_phrases": [],
  "installed": "0.1.0",
  "package": "echo-mcp",
  "protocol": null,
  "server": {
    "name": "echo",
    "version": "0.1"
  },
  "tools": [
    {
      "annotations": {
        "idempotentHint": false,
        "readOnlyHint": false
      },
      "args": {
        "text": "x"
      },
      "contradictions": [],
      "example": 0,
      "note": "appends",
      "outcomes": [
        {
          "changes": {
            "files": {
              "changed": [
                "notes.txt"
              ]
            }
          },
          "cls": "duplicate",
          "delivered": null,
          "effect": {},
          "first": {
            "content": []
          },
          "realized": null,
          "reissue": {
            "content": [
              {
                "text": "ok",
                "type": "text"
              }
            ]
          },
          "signal": "state: the re-issue changed it again",
          "treatment": "bare",
          "verified": null
        }
      ],
      "overlay": {
        "effect": "append"
      },
      "tool": "append",
      "undeclared": []
    }
  ],
  "untested": [],
  "version": "0.1.0",
  "world": "echo"
}
"""


def test_the_json_card_is_sorted_indented_by_two_and_ends_with_a_newline() -> None:
    """The .json file `--out` writes would change its bytes run to run, or be unreadable to a diff or a script."""
    assert to_json(tiny_card("0.1.0")) == TINY_JSON


def test_a_json_card_read_back_renders_and_compares_as_the_card_it_was_written_from(tmp_path: Path) -> None:
    """A card the viewer reads from `--out` would show other rows, or other changes, than the command printed."""
    for card in (new_card(), old_card()):
        path = tmp_path / f"{card['world']}-{card['version']}.json"
        path.write_text(to_json(card), encoding="utf-8")
    new = json.loads((tmp_path / "notes-2.0.0.json").read_text(encoding="utf-8"))
    old = json.loads((tmp_path / "notes-1.4.0.json").read_text(encoding="utf-8"))
    assert new == new_card() and old == old_card()
    assert table(new) == NEW_TABLE and markdown(new) == NEW_MARKDOWN
    assert compare(old, new) == compare(old_card(), new_card()) != []


# --- rows (what the viewer shows) --------------------------------------------------------------------------------

NOT_SENT = "(not sent to the server)"


def test_rows_name_each_example_and_carry_its_evidence() -> None:
    """The viewer's scorecard page would show a wrong class, answer, change or annotation for a tool."""
    shown = rows(new_card())
    assert [r["tool"] for r in shown] == ["add_note #1", "add_note #2", "delete_note", "echo", "purge",
                                         "rename_note", "tag_note"]
    assert shown[0] == {"tool": "add_note #1", "bare": "duplicate", "key": "safe", "verify": "safe", "realized": 2,
                        "reissue": "'added note n2'", "reissues": {"bare": "'added note n2'", "key": NOT_SENT,
                                                                   "verify": NOT_SENT},
                        "signal": "state: the effect is there 2 times",
                        "changes": "notes", "annotations": "readOnly=false idempotent=true destructive=false",
                        "contradictions": ["idempotentHint=true, but the re-issue made a second effect"],
                        "undeclared": [], "note": "adds a note"}
    assert shown[2] == {"tool": "delete_note", "bare": "silent_success", "key": None, "verify": None,
                        "realized": None, "reissue": "'deleted'", "reissues": {"bare": "'deleted'"},
                        "signal": "state: the call changed it; answer: success", "changes": "notes, tags",
                        "annotations": "none", "contradictions": [], "undeclared": ["readOnlyHint", "idempotentHint"],
                        "note": ""}
    assert shown[4] == {"tool": "purge", "bare": None, "key": "safe", "verify": None, "realized": None,
                        "reissue": "(not sent to the server)", "reissues": {"key": NOT_SENT}, "signal": "",
                        "changes": "nothing",
                        "annotations": "destructive=true", "contradictions": [], "undeclared": [], "note": ""}
    assert rows(old_card())[2]["reissue"] == "isError 'no note n1'"


# --- two releases compared (`--against`) -------------------------------------------------------------------------

OLD_TO_NEW = [  # each treatment's own re-issue answers: key's was 'added note n2' in 1.4.0, never sent in 2.0.0
    "add_note #1 (bare): silent success in 1.4.0 -> DUPLICATE in 2.0.0 (re-issue answered 'added note n1' -> "
    "'added note n2')",
    "add_note #1 (key): DUPLICATE in 1.4.0 -> safe in 2.0.0 (re-issue answered 'added note n2' -> "
    "(not sent to the server))",
    "add_note #1 (annotations): agree -> idempotentHint=true, but the re-issue made a second effect",
    "delete_note (bare): DUPLICATE in 1.4.0 -> silent success in 2.0.0 (re-issue answered isError 'no note n1' -> "
    "'deleted')",
    "delete_note (key): safe in 1.4.0 -> - in 2.0.0 (re-issue answered (not sent to the server) -> (not measured))",
    "legacy_export: only in 1.4.0",
    "purge: only in 2.0.0",
    "rename_note (key): - in 1.4.0 -> safe in 2.0.0 (re-issue answered (not measured) -> (not sent to the server))",
    "rename_note (verify): - in 1.4.0 -> safe in 2.0.0 (re-issue answered (not measured) -> "
    "(not sent to the server))",
    "tag_note (bare): silent success in 1.4.0 -> unmeasured in 2.0.0 (re-issue answered 'tagged' -> "
    "(not sent to the server))",
    "tag_note (annotations): idempotentHint=false, but the re-issue made no second effect -> agree",
]


def test_compare_names_each_change_with_the_release_it_happened_in() -> None:
    """`--against` would hide a class that changed, a tool added or removed, or credit a change to the wrong release."""
    assert compare(old_card(), new_card()) == OLD_TO_NEW


def test_compare_the_other_way_round_swaps_the_releases_and_the_classes() -> None:
    """Compared from the newer release, a regression would read as a fix (and a removed tool as an added one)."""
    assert compare(new_card(), old_card()) == [
        "add_note #1 (bare): DUPLICATE in 2.0.0 -> silent success in 1.4.0 (re-issue answered 'added note n2' -> "
        "'added note n1')",
        "add_note #1 (key): safe in 2.0.0 -> DUPLICATE in 1.4.0 (re-issue answered (not sent to the server) -> "
        "'added note n2')",
        "add_note #1 (annotations): idempotentHint=true, but the re-issue made a second effect -> agree",
        "delete_note (bare): silent success in 2.0.0 -> DUPLICATE in 1.4.0 (re-issue answered 'deleted' -> "
        "isError 'no note n1')",
        "delete_note (key): - in 2.0.0 -> safe in 1.4.0 (re-issue answered (not measured) -> (not sent to the server))",
        "legacy_export: only in 1.4.0",
        "purge: only in 2.0.0",
        "rename_note (key): safe in 2.0.0 -> - in 1.4.0 (re-issue answered (not sent to the server) -> (not measured))",
        "rename_note (verify): safe in 2.0.0 -> - in 1.4.0 (re-issue answered (not sent to the server) -> "
        "(not measured))",
        "tag_note (bare): unmeasured in 2.0.0 -> silent success in 1.4.0 (re-issue answered "
        "(not sent to the server) -> 'tagged')",
        "tag_note (annotations): agree -> idempotentHint=false, but the re-issue made no second effect",
    ]


def test_compare_of_a_release_with_itself_finds_nothing() -> None:
    """`--against` the same release would print changes that are not there (`nothing changed` is the known negative)."""
    assert compare(new_card(), new_card()) == []
    assert compare(old_card(), old_card()) == []


def test_several_contradictions_are_compared_as_one_readable_line() -> None:
    """Two contradictions of one tool would print as a Python list, or run together, in `--against`."""
    old = new_card()
    lies = next(t for t in old["tools"] if t["tool"] == "rename_note")
    assert len(lies["contradictions"]) == 2
    new = copy.deepcopy(old)
    next(t for t in new["tools"] if t["tool"] == "rename_note")["contradictions"] = []
    new["version"] = "2.1.0"
    assert compare(old, new) == [f"rename_note (annotations): {'; '.join(lies['contradictions'])} -> agree"]
    assert compare(old, new)[0] == ("rename_note (annotations): idempotentHint=false, but the re-issue made no "
                                    "second effect; readOnlyHint=true, but the call changed the state -> agree")


def test_a_tool_only_in_one_release_is_named_with_that_release_whichever_side_it_is_on() -> None:
    """A tool a release added or dropped would be credited to the other release, or stop the comparison early."""
    old, new = clean_card(), clean_card()
    new["version"] = "0.2.0"
    gone = dict(old["tools"][0], tool="aardvark")  # sorts before `append`, so the lines after it must still come
    added = dict(new["tools"][0], tool="zebra")
    old["tools"].append(gone)
    new["tools"].append(added)
    new["tools"][0]["outcomes"][0]["cls"] = "duplicate"
    assert compare(old, new) == [
        "aardvark: only in 0.1.0",
        "append (bare): safe in 0.1.0 -> DUPLICATE in 0.2.0 (re-issue answered (not sent to the server) -> "
        "(not sent to the server))",
        "zebra: only in 0.2.0",
    ]


# --- the `--fail-on` gate ----------------------------------------------------------------------------------------

GATE_NEW = {
    "duplicate": ["add_note #1: a re-issued call made a second effect"],
    "false-failure": ["add_note #2: a re-issued call failed although its effect exists"],
    "silent-success": ["delete_note: a re-issued call succeeded without doing anything"],
    "annotation": ["add_note #1: idempotentHint=true, but the re-issue made a second effect",
                   "rename_note: idempotentHint=false, but the re-issue made no second effect",
                   "rename_note: readOnlyHint=true, but the call changed the state"],
    "undeclared": ["delete_note: readOnlyHint undeclared", "delete_note: idempotentHint undeclared",
                   "echo: idempotentHint undeclared"],
}


def test_the_gate_knows_exactly_these_classes() -> None:
    """`--fail-on` would refuse a documented class or accept one the gate never checks."""
    assert FAIL_ON == ("duplicate", "false-failure", "silent-success", "annotation", "undeclared")
    assert set(GATE_NEW) == set(FAIL_ON)


@pytest.mark.parametrize("fail_on", FAIL_ON)
def test_each_gate_class_fails_on_its_own_tools_only(fail_on: str) -> None:
    """`--fail-on X` would fail CI on another class than X, miss a tool showing X, or fail a clean server."""
    assert failures(new_card(), (fail_on,)) == GATE_NEW[fail_on]
    assert failures(clean_card(), (fail_on,)) == []


def test_the_gate_on_every_class_lists_each_tool_s_failures_in_table_order() -> None:
    """`--fail-on` with several classes would drop a line of an earlier class or tool (the gate would pass wrongly)."""
    assert failures(new_card(), FAIL_ON) == [
        "add_note #1: a re-issued call made a second effect",
        "add_note #1: idempotentHint=true, but the re-issue made a second effect",
        "add_note #2: a re-issued call failed although its effect exists",
        "delete_note: a re-issued call succeeded without doing anything",
        "delete_note: readOnlyHint undeclared",
        "delete_note: idempotentHint undeclared",
        "echo: idempotentHint undeclared",
        "rename_note: idempotentHint=false, but the re-issue made no second effect",
        "rename_note: readOnlyHint=true, but the call changed the state",
    ]
    assert failures(old_card(), ("duplicate", "annotation")) == [
        "delete_note: a re-issued call made a second effect",
        "rename_note: idempotentHint=false, but the re-issue made no second effect",
        "rename_note: readOnlyHint=true, but the call changed the state",
        "tag_note: idempotentHint=false, but the re-issue made no second effect",
    ]
    assert failures(new_card(), ()) == [] and failures(clean_card(), FAIL_ON) == []


def test_a_sloppy_or_long_answer_is_shown_as_a_client_would_read_its_text() -> None:
    """A text block without text would print as `None`, an answer without content would crash the table, and an
    answer of exactly sixty characters would be cut with `...` although nothing is missing."""
    sixty = "n" * 60
    answers = [
        {"content": [{"type": "text"}, {"type": "text", "text": "made"}]},  # a text block that forgot its text
        {"structuredContent": {"id": 3}},  # structured content only: no text for a client to read
        {"isError": True},
        {"content": [{"type": "text", "text": sixty}]},
        {"content": [{"type": "text", "text": sixty + "m"}]},
    ]
    tools = tuple(ToolCard(f"t{i}", 0, {}, "", {"readOnlyHint": False, "idempotentHint": True}, {}, (
        _out("bare", "silent_success", "state: the call changed it; answer: success", reissue=a),))
        for i, a in enumerate(answers))
    card = _as_written(Scorecard("w", "p", "1", {"name": "s", "version": "1"}, "2025-06-18", tools, (), "1"))
    assert [r["reissue"] for r in rows(card)] == ["'made'", "''", "isError ''", repr(sixty), repr(sixty + "...")]
    assert f"re-issue answered {sixty!r}; it changed nothing" in table(card)
