"""Snapshot reading (`world/snapshot.py`): the exact diff between two probe snapshots, the values a dotted
argument path names, and whether a tool's declared identity holds in a snapshot or how many times it was realized
since s0, for each identity form (record with key_arg/match, match only, text, edits). Written for `make mutants`;
no server is started: the snapshots are the `{"records": {collection: {key: record}}}` a probe returns."""

from __future__ import annotations

from typing import Any

from aft_bench.world import snapshot
from aft_bench.world.external import Identity

# the identities the shipped worlds declare (worlds/*/world.toml), as a user writes them
ENTITY = Identity(collection="entities", key_arg="entities.*.name")
WRITE = Identity(collection="files", key_arg="path", match={"text": "content"})
RELATION = Identity(collection="relations",
                    key_arg=("relations.*.from", "relations.*.relationType", "relations.*.to"))
STAGED = Identity(collection="staged", key_arg="files")
COMMIT = Identity(collection="commits", match={"message": "message"})
APPEND = Identity(collection="files", record_arg="path", field="text", text_of="text")
EDIT = Identity(collection="files", record_arg="path", field="text", replace_old="edits.*.oldText",
                replace_new="edits.*.newText")


def snap(collection: str, recs: dict[str, Any]) -> dict[str, Any]:
    return {"records": {collection: recs}}


def notes(text: str) -> dict[str, Any]:
    """A filesystem snapshot holding notes.md with `text`."""
    return snap("files", {"notes.md": {"text": text}})


def edit(*pairs: tuple[Any, Any]) -> dict[str, Any]:
    return {"path": "/workspace/notes.md", "edits": [{"oldText": o, "newText": n} for o, n in pairs]}


# --- diff ---------------------------------------------------------------------------------------------------------

def test_diff_names_added_removed_and_changed_keys_of_every_collection() -> None:
    """The scorecard would show a wrong or missing change (or a whole collection's records vanishing unnoticed)."""
    before = {"records": {"notes": {"a": {"v": 1}, "b": {"v": 1}, "c": {"v": 1}},
                          "gone": {"x": {"v": 1}},
                          "same": {"k": {"v": 1}}}}
    after = {"records": {"notes": {"a": {"v": 1}, "b": {"v": 2}, "d": {"v": 1}},
                         "same": {"k": {"v": 1}},
                         "fresh": {"y": {"v": 1}, "z": {"v": 1}}}}
    d = snapshot.diff(before, after)
    assert d == {"fresh": {"added": ["y", "z"], "removed": [], "changed": []},
                 "gone": {"added": [], "removed": ["x"], "changed": []},
                 "notes": {"added": ["d"], "removed": ["c"], "changed": ["b"]}}
    assert list(d) == ["fresh", "gone", "notes"]
    assert snapshot.diff(after, before) == {"fresh": {"added": [], "removed": ["y", "z"], "changed": []},
                                            "gone": {"added": ["x"], "removed": [], "changed": []},
                                            "notes": {"added": ["c"], "removed": ["d"], "changed": ["b"]}}


def test_diff_of_equal_or_empty_snapshots_is_empty() -> None:
    """An untouched world would be reported as changed (a read tool judged a writer)."""
    s = {"records": {"notes": {"a": {"v": 1}}, "empty": {}}}
    assert snapshot.diff(s, {"records": {"notes": {"a": {"v": 1}}, "empty": {}}}) == {}
    assert snapshot.diff({}, {"records": None}) == {}
    assert snapshot.diff({}, s) == {"notes": {"added": ["a"], "removed": [], "changed": []}}
    assert snapshot.diff(s, {}) == {"notes": {"added": [], "removed": ["a"], "changed": []}}


# --- values -------------------------------------------------------------------------------------------------------

def test_values_of_each_dotted_path_form() -> None:
    """An identity would read the wrong argument: a list argument, each item's field, or one item by index."""
    args = {"path": "/workspace/a.txt", "files": ["a.txt", "b.txt"],
            "edits": [{"oldText": "x", "newText": "y"}, {"oldText": "p", "newText": "q"}],
            "groups": [{"tags": ["a", "b"]}, {"tags": ["c"]}, {"name": "no tags"}]}
    assert snapshot.values(args, "path") == ["/workspace/a.txt"]
    assert snapshot.values(args, "files") == ["a.txt", "b.txt"]  # a list argument: its items
    assert snapshot.values(args, "files.*") == ["a.txt", "b.txt"]
    assert snapshot.values(args, "edits.*.newText") == ["y", "q"]
    assert snapshot.values(args, "edits.0.newText") == ["y"]
    assert snapshot.values(args, "edits.1.oldText") == ["p"]
    assert snapshot.values(args, "groups.*.tags") == ["a", "b", "c"]
    assert snapshot.values(args, "groups.*.tags.*") == ["a", "b", "c"]
    assert snapshot.values(args, "groups.1.tags.0") == ["c"]


def test_values_of_a_path_the_arguments_do_not_have_is_empty() -> None:
    """A missing key, an index past the end or a field of a list would crash the judge or name a wrong value."""
    args = {"edits": [{"oldText": "x"}, {"oldText": "p"}], "path": "a.txt"}
    assert snapshot.values(args, "edits.2.oldText") == []  # past the end (len 2)
    assert snapshot.values(args, "edits.5") == []
    assert snapshot.values(args, "edits.oldText") == []  # a field of a list, not of its items
    assert snapshot.values(args, "edits.*.newText") == []
    assert snapshot.values(args, "path.*") == []  # a string is not a list
    assert snapshot.values(args, "path.0") == []
    assert snapshot.values(args, "nothing") == []
    assert snapshot.values({}, "a.b") == []
    assert args == {"edits": [{"oldText": "x"}, {"oldText": "p"}], "path": "a.txt"}  # not changed by reading


# --- record form: key_arg (+ match) -------------------------------------------------------------------------------

def test_a_keyed_record_holds_only_with_the_matching_fields() -> None:
    """write_file would be judged done when the file holds other text, or not done when it holds the text."""
    args = {"path": "/workspace/n.md", "content": "hello"}
    assert snapshot.holds(WRITE, snap("files", {"n.md": {"text": "hello"}}), args) is True
    assert snapshot.holds(WRITE, snap("files", {"n.md": {"text": "other"}}), args) is False
    assert snapshot.holds(WRITE, snap("files", {"m.md": {"text": "hello"}}), args) is False
    assert snapshot.holds(WRITE, {}, args) is False


def test_a_list_key_argument_holds_only_when_every_key_is_there() -> None:
    """git add of two files would be judged done when only one is staged."""
    args = {"files": ["a.txt", "/workspace/b.txt"]}
    assert snapshot.holds(STAGED, snap("staged", {"a.txt": {}, "b.txt": {}}), args) is True
    assert snapshot.holds(STAGED, snap("staged", {"a.txt": {}}), args) is False
    s0 = snap("staged", {})
    assert snapshot.realized(STAGED, s0, snap("staged", {"a.txt": {}, "b.txt": {}}), args) == 1


def test_a_second_identical_record_is_counted_as_a_second_effect() -> None:
    """A duplicated create_entities would go uncounted (or a single one be counted twice)."""
    args = {"entities": [{"name": "Carol"}]}
    s0 = snap("entities", {"Alice": {}})
    assert snapshot.realized(ENTITY, s0, snap("entities", {"Alice": {}, "Carol": {}}), args) == 1
    assert snapshot.realized(ENTITY, s0, snap("entities", {"Alice": {}, "Carol": {}, "Carol#2": {}}), args) == 2
    assert snapshot.realized(ENTITY, s0, snap("entities", {"Alice": {}, "Carol": {}, "Carol#2": {},
                                                           "Carol#3": {}}), args) == 3
    assert snapshot.realized(ENTITY, s0, s0, args) == 0
    assert snapshot.holds(ENTITY, snap("entities", {"Carol": {}, "Carol#2": {}}), args) is True
    assert snapshot.holds(ENTITY, snap("entities", {"Carol#2": {}}), args) is False  # alone: an entity so named


def test_a_key_of_several_paths_joins_their_values_item_by_item() -> None:
    """create_relations would be judged by a wrong key: reversed, mixed across items, or not joined with `|`."""
    one = {"relations": [{"from": "A", "relationType": "knows", "to": "B"}]}
    assert snapshot.holds(RELATION, snap("relations", {"A|knows|B": {}}), one) is True
    assert snapshot.holds(RELATION, snap("relations", {"B|knows|A": {}}), one) is False
    assert snapshot.holds(RELATION, snap("relations", {"A": {}, "B": {}, "knows": {}}), one) is False
    two = {"relations": [{"from": "A", "relationType": "knows", "to": "B"},
                         {"from": "B", "relationType": "likes", "to": "C"}]}
    s0 = snap("relations", {})
    assert snapshot.holds(RELATION, snap("relations", {"A|knows|B": {}, "B|likes|C": {}}), two) is True
    assert snapshot.holds(RELATION, snap("relations", {"A|knows|B": {}, "B|knows|C": {}}), two) is False
    assert snapshot.realized(RELATION, s0, snap("relations", {"A|knows|B": {}, "B|likes|C": {}}), two) == 1
    assert snapshot.realized(RELATION, s0, snap("relations", {"A|knows|B": {}, "A|knows|B#2": {},
                                                              "B|likes|C": {}}), two) == 2
    assert snapshot.holds(RELATION, snap("relations", {"A|knows|B": {}}), {"relations": []}) is False


def test_a_key_with_a_hash_is_its_own_record_and_its_repeat_counts() -> None:
    """An entity `C#` would be taken for `C`, or its second copy `C##2` not counted as a duplicate."""
    s0 = snap("entities", {})
    c_sharp = {"entities": [{"name": "C#"}]}
    twice = snap("entities", {"C#": {}, "C##2": {}})
    assert snapshot.realized(ENTITY, s0, twice, c_sharp) == 2
    assert snapshot.holds(ENTITY, twice, c_sharp) is True
    c = {"entities": [{"name": "C"}]}
    assert snapshot.holds(ENTITY, snap("entities", {"C#": {}}), c) is False
    assert snapshot.realized(ENTITY, s0, snap("entities", {"C#": {}, "Cx#2": {}}), c) == 0


def test_a_name_ending_in_a_hash_and_digits_is_its_own_record_not_a_repeat() -> None:
    """A branch `issue#12` created would read as not made, and as a second `issue` that does not exist."""
    branch = Identity(collection="branches", key_arg="branch_name")
    s0 = snap("branches", {"main": {}})
    made = snap("branches", {"main": {}, "issue#12": {}})
    assert snapshot.holds(branch, made, {"branch_name": "issue#12"}) is True
    assert snapshot.realized(branch, s0, made, {"branch_name": "issue#12"}) == 1
    assert snapshot.holds(branch, made, {"branch_name": "issue"}) is False
    assert snapshot.realized(branch, s0, made, {"branch_name": "issue"}) == 0
    both = snap("branches", {"main": {}, "issue": {}, "issue#2": {}})  # the probe's repeat: beside `issue` itself
    assert snapshot.realized(branch, s0, both, {"branch_name": "issue"}) == 2
    assert snapshot.realized(branch, s0, snap("branches", {"issue#12": {}, "issue#12#2": {}}),
                             {"branch_name": "issue#12"}) == 2


def test_an_edit_of_an_existing_record_is_realized_once() -> None:
    """Overwriting an existing file would be missed as an effect, or an unchanged file counted as written."""
    args = {"path": "/workspace/n.md", "content": "new"}
    s0 = snap("files", {"n.md": {"text": "old"}, "o.md": {"text": "new"}})
    s = snap("files", {"n.md": {"text": "new"}, "o.md": {"text": "new"}})
    assert snapshot.realized(WRITE, s0, s, args) == 1
    assert snapshot.realized(WRITE, s, s, args) == 0  # already so before the call


def test_a_call_naming_no_key_neither_holds_nor_is_realized() -> None:
    """create_entities with no entities would be judged done, counted once, or crash the judge (no default)."""
    empty = {"entities": []}
    s = snap("entities", {"Carol": {}})
    assert snapshot.holds(ENTITY, s, empty) is False
    assert snapshot.realized(ENTITY, snap("entities", {}), s, empty) == 0
    assert snapshot.realized(ENTITY, snap("entities", {}), s, {}) == 0


# --- record form: match only --------------------------------------------------------------------------------------

def test_a_match_only_identity_holds_by_field_values() -> None:
    """git commit would be judged done without the commit, or not done with it."""
    s = snap("commits", {"abc123": {"message": "Fix"}, "def456": {"message": "Seed"}})
    assert snapshot.holds(COMMIT, s, {"message": "Fix"}) is True
    assert snapshot.holds(COMMIT, s, {"message": "Other"}) is False
    assert snapshot.holds(COMMIT, snap("commits", {}), {"message": "Fix"}) is False
    assert snapshot.holds(COMMIT, s, {}) is False  # no message argument: nothing matches a record that has one


def test_a_match_only_identity_counts_new_matching_records() -> None:
    """Two identical commits would be counted as one, or a commit there before counted as the call's."""
    s0 = snap("commits", {"a1": {"message": "Seed"}})
    s = snap("commits", {"a1": {"message": "Seed"}, "b2": {"message": "Fix"}, "c3": {"message": "Fix"},
                         "d4": {"message": "Other"}})
    assert snapshot.realized(COMMIT, s0, s, {"message": "Fix"}) == 2
    assert snapshot.realized(COMMIT, s0, s, {"message": "Seed"}) == 0


def test_a_match_argument_with_several_values_matches_nothing() -> None:
    """A match path naming two values would silently compare against the first one only."""
    ident = Identity(collection="people", match={"name": "entities.*.name"})
    s = snap("people", {"1": {"name": "Ann"}, "2": {"name": "Bob"}})
    assert snapshot.holds(ident, s, {"entities": [{"name": "Ann"}, {"name": "Bob"}]}) is False
    assert snapshot.holds(ident, s, {"entities": [{"name": "Ann"}]}) is True


# --- text form ----------------------------------------------------------------------------------------------------

def test_a_text_identity_holds_only_when_the_text_is_in_the_field() -> None:
    """An append would be judged done when its text is not in the file (or the file is missing)."""
    args = {"path": "/workspace/notes.md", "text": "hello"}
    assert snapshot.holds(APPEND, notes("say hello\n"), args) is True
    assert snapshot.holds(APPEND, notes("say hi\n"), args) is False
    assert snapshot.holds(APPEND, snap("files", {"other.md": {"text": "hello"}}), args) is False  # no such file
    assert snapshot.holds(APPEND, snap("files", {"notes.md": {"size": 5}}), args) is False  # no text field
    assert snapshot.holds(APPEND, snap("files", {"notes.md": {"text": ["hello"]}}), args) is False  # not a string
    assert snapshot.holds(APPEND, snap("files", {"notes.md": "hello"}), args) is False  # not a record


def test_an_empty_or_missing_text_is_never_present() -> None:
    """An empty append would be judged done on any file (the empty text is found everywhere), or crash."""
    assert snapshot.holds(APPEND, notes("hello"), {"path": "notes.md", "text": ""}) is False
    assert snapshot.holds(APPEND, notes("hello"), {"path": "notes.md"}) is False
    assert snapshot.holds(APPEND, notes("hello"), {"text": "hello"}) is False  # no path argument
    assert snapshot.realized(APPEND, notes(""), notes("hello"), {"path": "notes.md", "text": ""}) == 0


def test_a_text_identity_counts_new_appearances_only() -> None:
    """Text already in the file would be credited to the call, or a second append not counted as a duplicate."""
    args = {"path": "/workspace/notes.md", "text": "hello"}
    assert snapshot.realized(APPEND, notes("hello"), notes("hello"), args) == 0  # there before the call
    assert snapshot.holds(APPEND, notes("hello"), args) is True
    assert snapshot.realized(APPEND, notes("hello"), notes("hello hello"), args) == 1
    assert snapshot.realized(APPEND, notes(""), notes("hello hello"), args) == 2
    assert snapshot.realized(APPEND, snap("files", {}), notes("hello"), args) == 1  # file created by the call
    assert snapshot.realized(APPEND, notes("hello hello"), notes("hello"), args) == 0  # removed: not negative


# --- edits form ---------------------------------------------------------------------------------------------------

def test_an_edit_replaces_the_first_occurrence_once_per_realization() -> None:
    """An edit_file would be counted wrong when its old text occurs more than once in the file."""
    args = edit(("x = 1", "x = 2"))
    s0 = notes("x = 1\nx = 1\nx = 1\n")
    once, twice = notes("x = 2\nx = 1\nx = 1\n"), notes("x = 2\nx = 2\nx = 1\n")
    assert snapshot.realized(EDIT, s0, once, args) == 1
    assert snapshot.realized(EDIT, s0, twice, args) == 2
    assert snapshot.realized(EDIT, s0, notes("x = 2\nx = 2\nx = 2\n"), args) == 3
    assert snapshot.realized(EDIT, s0, notes("x = 1\nx = 2\nx = 1\n"), args) == 0  # not what the edit gives
    assert snapshot.realized(EDIT, s0, s0, args) == 0
    assert snapshot.holds(EDIT, once, args, s0) is True
    assert snapshot.holds(EDIT, s0, args, s0) is False
    assert snapshot.holds(EDIT, once, args) is False  # without the state it was made on


def test_an_edit_of_several_replacements_applies_them_in_order() -> None:
    """A multi-edit call would be judged by its first replacement only."""
    args = edit(("a", "b"), ("b", "c"))
    s0 = notes("a b\n")
    assert snapshot.realized(EDIT, s0, notes("c b\n"), args) == 1  # a->b, then the first b (the new one) ->c
    assert snapshot.realized(EDIT, s0, notes("b c\n"), args) == 0
    assert snapshot.realized(EDIT, s0, notes("b b\n"), args) == 0  # the first replacement only
    assert snapshot.realized(EDIT, notes("a\n"), notes("c\n"), args) == 1


def test_an_edit_is_looked_for_up_to_eight_repetitions() -> None:
    """Repeated edits would be miscounted near the limit, or counted beyond it."""
    args = edit(("a", "b"))
    s0 = notes("a\n" * 9)
    for k in (1, 6, 7, 8):
        assert snapshot.realized(EDIT, s0, notes("b\n" * k + "a\n" * (9 - k)), args) == k
    assert snapshot.realized(EDIT, s0, notes("b\n" * 9), args) == 0  # nine: past MAX_EDITS
    assert snapshot.MAX_EDITS == 8


def test_an_edit_that_cannot_apply_is_not_realized() -> None:
    """An edit that could not have happened would be counted (or crash the judge) when the file is unchanged."""
    s0 = notes("hello\n")
    assert snapshot.realized(EDIT, s0, s0, edit(("absent", "x"))) == 0  # old text not in the file
    assert snapshot.realized(EDIT, s0, s0, {"path": "notes.md", "edits": []}) == 0  # no edits at all
    assert snapshot.realized(EDIT, s0, s0, {"path": "notes.md"}) == 0
    assert snapshot.holds(EDIT, s0, {"path": "notes.md", "edits": []}, s0) is False
    assert snapshot.realized(EDIT, s0, notes("5\n"), edit(("hello", 5))) == 0  # a new text that is not a string
    assert snapshot.realized(EDIT, s0, notes("hello\n"), edit((None, "hello"))) == 0
    assert snapshot.realized(EDIT, s0, notes("bye\n"), edit(("hello", "bye"))) == 1


def test_an_edit_of_a_file_missing_before_or_after_is_not_realized() -> None:
    """An edit of a file the call created or deleted would be counted, or crash the judge."""
    args = edit(("hello", "bye"))
    assert snapshot.realized(EDIT, snap("files", {}), notes("bye\n"), args) == 0
    assert snapshot.realized(EDIT, notes("hello\n"), snap("files", {}), args) == 0
    assert snapshot.holds(EDIT, notes("bye\n"), args, snap("files", {})) is False
