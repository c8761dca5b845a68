"""Generated tool catalogs: exact sizes, required tools present, confusable siblings first, deterministic."""

from __future__ import annotations

import pytest

from aft_bench.world.catalog import all_tools, confusables, generate_catalog, load_vocab


@pytest.mark.parametrize("size", load_vocab().sizes)
def test_catalog_has_exact_size_unique_names_and_required_tools(size: int) -> None:
    required = ("upload_file", "create_issue")
    tools = generate_catalog(size, seed=3, required=required)
    names = [t.name for t in tools]
    assert len(names) == size == len(set(names))
    assert set(required) <= set(names)


def test_sizes_are_the_papers() -> None:
    assert load_vocab().sizes == (10, 50, 200, 1000)
    assert len(all_tools(load_vocab())) >= 1000


def test_small_catalog_holds_confusable_siblings() -> None:
    names = {t.name for t in generate_catalog(10, seed=0, required=("create_issue",))}
    assert "create_pull_request" in names  # confusable resource
    assert len(names & {"delete_issue", "update_issue", "get_issue", "list_issue", "upload_issue",
                        "download_issue"}) >= 2  # same resource, other actions


def test_confusables_cover_families() -> None:
    tools = all_tools(load_vocab())
    c = confusables(tools["upload_file"], load_vocab())
    assert c[0] == "upload_folder" and "download_file" in c and "delete_file" in c


def test_deterministic_and_seed_dependent() -> None:
    a = [t.name for t in generate_catalog(50, seed=1)]
    assert a == [t.name for t in generate_catalog(50, seed=1)]
    assert a != [t.name for t in generate_catalog(50, seed=2)]


def test_cards_are_more_compact_than_schemas() -> None:
    tools = generate_catalog(200, seed=0)
    assert sum(len(t.card()) for t in tools) * 2 < sum(len(t.schema_text()) for t in tools)


def test_negated_descriptions_exist() -> None:
    text = " ".join(t.description for t in all_tools(load_vocab()).values())
    assert "does not delete" in text.lower() and "read-only" in text.lower()


@pytest.mark.parametrize("size, required", [(0, ()), (5000, ()), (10, ("teleport_file",))])
def test_bad_catalog_requests_raise(size: int, required: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        generate_catalog(size, seed=0, required=required)
