"""Generated tool catalogs of 10/50/200/1000 tools with confusable families, for the discovery workload.

The vocabulary is data (`worlds/catalog/vocab.toml`); the generator is deterministic in (size, seed,
required tools). Required tools are always present, and their confusable siblings are placed first so
that a small catalog is not trivially easy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aft_bench.common.canonical import canonical_json, digest
from aft_bench.common.datafile import read_toml, validate
from aft_bench.common.errors import InputError
from aft_bench.common.paths import WORLDS
from aft_bench.world.manifest import Operation, Principal, World, WorldInfo, WorldManifest

VOCAB_PATH = WORLDS / "catalog" / "vocab.toml"


class Action(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    verb: str
    text: str
    effect: str


class Vocab(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    sizes: tuple[int, ...]
    confusable_resources: tuple[tuple[str, str], ...] = ()
    actions: tuple[Action, ...] = Field(min_length=1)
    resources: dict[str, str] = Field(min_length=1)


@dataclass(frozen=True)
class Tool:
    """One catalog tool: a full schema and a compact capability card."""

    name: str
    action: str
    resource: str
    description: str
    effect: str
    parameters: dict[str, Any]

    def schema(self) -> dict[str, Any]:
        """The full schema an eager interface shows."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def card(self) -> str:
        """The compact capability card a selective interface shows."""
        return f"{self.name}: {self.description.split('.')[0]}."

    def schema_text(self) -> str:
        return canonical_json(self.schema())


@lru_cache(maxsize=4)
def load_vocab(path: Path = VOCAB_PATH) -> Vocab:
    vocab = validate(Vocab, read_toml(path), path)
    for i, pair in enumerate(vocab.confusable_resources):
        for r in pair:
            if r not in vocab.resources:
                raise InputError(path, f"confusable_resources.{i}", r, "not a declared resource")
    return vocab


def _tool(action: Action, resource: str, gloss: str) -> Tool:
    noun = resource.replace("_", " ")
    params = {
        "type": "object",
        "properties": {"target": {"type": "string", "description": f"Id or name of the {noun}."}},
        "required": ["target"],
    }
    return Tool(
        name=f"{action.verb}_{resource}",
        action=action.verb,
        resource=resource,
        description=action.text.format(r=noun) + f" A {noun} is {gloss}.",
        effect=action.effect,
        parameters=params,
    )


_ALL_TOOLS: dict[int, tuple[Vocab, dict[str, Tool]]] = {}


def all_tools(vocab: Vocab) -> dict[str, Tool]:
    """Every (action, resource) tool of a vocabulary, built once per vocabulary object."""
    hit = _ALL_TOOLS.get(id(vocab))
    if hit is None or hit[0] is not vocab:
        hit = (vocab, {t.name: t for t in (_tool(a, r, g) for r, g in vocab.resources.items() for a in vocab.actions)})
        _ALL_TOOLS[id(vocab)] = hit
    return hit[1]


@lru_cache(maxsize=64)
def _seed_order(names: tuple[str, ...], seed: int) -> tuple[str, ...]:
    """Every tool name in a seeded but stable order (the fill order of catalogs)."""
    return tuple(sorted(names, key=lambda n: digest([seed, n])))


def confusables(tool: Tool, vocab: Vocab) -> list[str]:
    """Tools easily mistaken for `tool`: same resource other action, same action on a confusable resource."""
    out = [f"{a.verb}_{tool.resource}" for a in vocab.actions if a.verb != tool.action]
    for pair in vocab.confusable_resources:
        if tool.resource in pair:
            other = pair[1] if pair[0] == tool.resource else pair[0]
            out.insert(0, f"{tool.action}_{other}")
    return out


def generate_catalog(size: int, seed: int, required: tuple[str, ...] = (), vocab: Vocab | None = None) -> tuple[Tool, ...]:
    """A deterministic catalog of `size` tools holding `required`, their confusable siblings, then seeded fill."""
    vocab = vocab or load_vocab()
    tools = all_tools(vocab)
    if size < 1 or size > len(tools):
        raise ValueError(f"catalog size must be in 1..{len(tools)}, got {size}")
    unknown = [r for r in required if r not in tools]
    if unknown:
        raise ValueError(f"unknown required tools {unknown}")
    chosen: list[str] = list(dict.fromkeys(required))
    for name in required:
        for c in confusables(tools[name], vocab)[:4]:
            if c not in chosen:
                chosen.append(c)
    taken = set(chosen)
    rest = [n for n in _seed_order(tuple(tools), seed) if n not in taken]
    chosen = (chosen + rest)[:size]
    if not set(required) <= set(chosen):
        raise ValueError(f"catalog size {size} is too small for {len(required)} required tools")
    position = {n: i for i, n in enumerate(_seed_order(tuple(tools), seed + 1_000_003))}
    return tuple(sorted((tools[n] for n in chosen), key=lambda t: position[t.name]))


def catalog_world(tools: tuple[Tool, ...], world_id: str = "catalog") -> World:
    """A world whose operations are the catalog's tools: a write records `{tool, target}` in `actions`."""
    manifest = WorldManifest.model_construct(
        world=WorldInfo(id=world_id, description=f"Generated catalog of {len(tools)} tools."),
        collections={"actions": {}},
        state={},
        principals={"agent": Principal(permissions=["catalog.use"])},
        operations={t.name: _operation(t) for t in tools},
    )
    return World(path=VOCAB_PATH, manifest=manifest)


_OPERATIONS: dict[tuple[str, str], Operation] = {}


def _operation(t: Tool) -> Operation:
    """The validated operation behind one catalog tool (validated once per tool, then reused)."""
    cached = _OPERATIONS.get((t.name, t.description))
    if cached is not None:
        return cached
    op: dict[str, Any] = {
        "description": t.description,
        "collection": "actions",
        "permission": "catalog.use",
        "args": {"target": {"type": "str", "description": t.parameters["properties"]["target"]["description"]}},
    }
    if t.effect == "read":
        op.update(kind="list", effect="read", where={"tool": t.name, "target": "$target"})
    else:
        op.update(kind="create", effect=t.effect, key_prefix="a", set={"tool": t.name, "target": "$target"})
    _OPERATIONS[(t.name, t.description)] = validate(Operation, op, VOCAB_PATH, f"operations.{t.name}")
    return _OPERATIONS[(t.name, t.description)]
