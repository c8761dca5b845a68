"""Routing suites as data: cases (a request and the tools it needs) over a generated catalog, generated
deterministically from the catalog vocabulary and `worlds/routing/templates.toml` into
`worlds/routing/<suite>.toml` (`aft-bench route-suites --write`); a test regenerates them byte for byte."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import InputError
from aft_bench.common.paths import WORLDS
from aft_bench.world.catalog import Tool, all_tools, generate_catalog, load_vocab

ROUTING = WORLDS / "routing"
TEMPLATES = ROUTING / "templates.toml"
# suite -> (cases, catalog size, catalog seed, description), as Tool Forge sizes its Lite, L2 and L3 suites
SHAPES: dict[str, tuple[int, int, int, str]] = {
    "lite": (8, 250, 1, "fast regression: requests in the catalog's own words"),
    "l2": (50, 600, 2, "realistic: paraphrased single requests and two-step requests"),
    "l3": (25, 500, 3, "adversarial: negation, confusable families, read/write ambiguity"),
    "l3h": (25, 500, 4, "held out: l3's phenomena in phrasings written after the reranker was frozen"),
    "l3x": (25, 500, 5, "held out: l3's phenomena in requests written before the embedding ranker existed"),
    "l3y": (25, 500, 6, "held out: l3's phenomena in everyday verbs, written before the transformer ranker"),
}
# held-out suite -> its own templates: l3h's never used to change the reranker, l3x's and l3y's never to change any
HELD_OUT: dict[str, Path] = {"l3h": ROUTING / "templates_heldout.toml", "l3x": ROUTING / "templates_heldout2.toml",
                             "l3y": ROUTING / "templates_heldout3.toml"}


class _Phrasings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    phrasings: dict[str, tuple[str, ...]] | tuple[str, ...] = Field(min_length=1)


class _L3(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    phenomenon: str = Field(min_length=1)
    text: str = Field(min_length=1)
    expect: tuple[str, ...] = Field(min_length=1)


class Templates(BaseModel):
    """`worlds/routing/templates.toml`."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    names: tuple[str, ...] = Field(min_length=2)
    events: tuple[str, ...] = Field(min_length=1)
    lite: _Phrasings | None = None
    l2: _Phrasings | None = None
    l3: tuple[_L3, ...] = Field(min_length=1)


class Case(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str = Field(min_length=1)
    intent: str = Field(min_length=1)
    expected: tuple[str, ...] = Field(min_length=1)
    phenomenon: str = ""


class SuiteInfo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str = Field(min_length=1)
    description: str = ""
    catalog_size: int = Field(ge=1)
    catalog_seed: int = 0


class Suite(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    suite: SuiteInfo
    cases: tuple[Case, ...] = Field(min_length=1)

    def catalog(self) -> tuple[Tool, ...]:
        """The suite's catalog: every expected tool, their confusable siblings, then seeded fill."""
        required = tuple(dict.fromkeys(t for c in self.cases for t in c.expected))
        return generate_catalog(self.suite.catalog_size, self.suite.catalog_seed, required)


def load_suite(name_or_path: str) -> Suite:
    """A suite by name (`lite`, `l2`, `l3`) or path; every expected tool must be a catalog tool."""
    path = ROUTING / f"{name_or_path}.toml" if name_or_path in SHAPES else Path(name_or_path)
    suite = validate(Suite, read_toml(path), path)
    tools = all_tools(load_vocab())
    ids: set[str] = set()
    for i, case in enumerate(suite.cases):
        if case.id in ids:
            raise InputError(path, f"cases.{i}.id", case.id, "duplicate case id")
        ids.add(case.id)
        for t in case.expected:
            if t not in tools:
                raise InputError(path, f"cases.{i}.expected", t, "not a tool of the catalog vocabulary")
    if len(tools) < suite.suite.catalog_size:
        raise InputError(path, "suite.catalog_size", suite.suite.catalog_size, f"the vocabulary has {len(tools)} tools")
    return suite


def generate(name: str, templates: Path | None = None) -> Suite:
    """Suite `name`, generated from the vocabulary and the templates (same input, same suite)."""
    n, size, seed, description = SHAPES[name]
    templates = templates or HELD_OUT.get(name, TEMPLATES)
    t = validate(Templates, read_toml(templates), templates).model_dump()
    if name in ("lite", "l2") and t[name] is None:
        raise InputError(templates, name, None, f"suite {name} needs its [{name}] phrasings")
    vocab = load_vocab()
    for verb in (t["l2"] or {"phrasings": {}})["phrasings"]:
        if verb not in {a.verb for a in vocab.actions}:
            raise InputError(templates, f"l2.phrasings.{verb}", verb, "not an action of the catalog vocabulary")
    rng = random.Random(f"{name}:{seed}")
    verbs = {a.verb: a for a in vocab.actions}
    resources = sorted(vocab.resources)

    def fill(text: str, resource: str, verb: str = "") -> str:
        other = rng.choice([x for x in t["names"] if x not in text])
        try:
            return text.format(Verb=verb.capitalize(), noun=resource.replace("_", " "), name=rng.choice(t["names"]),
                               other=other, event=rng.choice(t["events"]), resource=resource)
        except (KeyError, IndexError, ValueError):
            raise InputError(templates, name, text, "a template uses an unknown {slot} (known: Verb, noun, name, "
                             "other, event, resource)") from None

    cases: list[dict[str, Any]] = []
    if name == "lite":
        for i in range(n):
            verb, resource = rng.choice(sorted(verbs)), rng.choice(resources)
            cases.append({"intent": fill(t["lite"]["phrasings"][0], resource, verb), "expected": [f"{verb}_{resource}"]})
    elif name == "l2":
        phrasings: dict[str, list[str]] = t["l2"]["phrasings"]

        def single() -> tuple[str, str]:
            verb, resource = rng.choice(sorted(phrasings)), rng.choice(resources)
            return fill(rng.choice(phrasings[verb]), resource), f"{verb}_{resource}"

        for i in range(n):
            if i % 10 < 7:
                text, tool = single()
                cases.append({"intent": text, "expected": [tool], "phenomenon": "single"})
            else:
                (a, ta), (b, tb) = single(), single()
                if ta == tb:
                    b, tb = single()
                cases.append({"intent": f"{a.rstrip('.')}, and then {b[0].lower()}{b[1:]}", "expected": [ta, tb],
                              "phenomenon": "two-step"})
    else:
        templates_ = list(t["l3"])
        extra = [x for x in templates_ if "{noun}" in x["text"]]
        for i, tpl in enumerate(templates_ + [rng.choice(extra) for _ in range(n - len(templates_))]):
            resource = rng.choice(resources)
            cases.append({"intent": fill(tpl["text"], resource),
                          "expected": [e.format(resource=resource) for e in tpl["expect"]],
                          "phenomenon": tpl["phenomenon"]})
    for i, c in enumerate(cases):
        c["id"] = f"{name}-{i + 1:02d}"
    return validate(Suite, {"suite": {"id": name, "description": description, "catalog_size": size,
                                      "catalog_seed": seed}, "cases": cases}, templates)


def to_toml(suite: Suite) -> str:
    """The suite file's text (stable: a regenerated suite is byte for byte the committed one)."""
    import json

    info = suite.suite
    lines = [f"# Routing suite {info.id}: {info.description}. Generated by `aft-bench route-suites --write` from the",
             "# catalog vocabulary and worlds/routing/templates.toml; edit those, not this file.",
             "[suite]", f"id = {json.dumps(info.id)}", f"description = {json.dumps(info.description)}",
             f"catalog_size = {info.catalog_size}", f"catalog_seed = {info.catalog_seed}", ""]
    for c in suite.cases:
        lines += ["[[cases]]", f"id = {json.dumps(c.id)}", f"intent = {json.dumps(c.intent)}",
                  f"expected = {json.dumps(list(c.expected))}", f"phenomenon = {json.dumps(c.phenomenon)}", ""]
    return "\n".join(lines)
