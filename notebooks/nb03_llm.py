"""Tools and a scripted stand-in for Claude, for notebooks/03_planning_with_llm.ipynb.

The notebook plans a goal with ``al.LLMPlanner`` and runs an LLM task. Offline it
replays the model replies recorded in ``notebooks/replay/``. Those replies were
*not* written by Claude: they were recorded from :func:`stand_in`, a plain Python
function (wrapped in ``al.llm.testing.FunctionModel``) that plays Claude's part by
reading its prompt and answering with fixed logic. Its token counts are
FunctionModel's estimate (characters / 4); its costs price those tokens as
:data:`PRICED_AS` would be priced.

To record the cache again (after changing a tool, a docstring, the goal or the
stand-in: anything that changes a request), run the notebook once with
``ARGUS_NB03_RECORD=1`` in the environment, e.g.::

    ARGUS_NB03_RECORD=1 .venv/bin/jupyter nbconvert --to notebook --execute \\
        --output /tmp/recorded.ipynb notebooks/03_planning_with_llm.ipynb

With ``ANTHROPIC_API_KEY`` set the notebook asks Claude instead (and records its
replies in the notebook's temporary workspace, never in ``notebooks/replay``).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import argus_lab as al
from argus_lab.llm import (
    Model,
    ModelRequest,
    ModelResponse,
    ReplyCache,
    ToolResultBlock,
)
from argus_lab.llm.testing import FunctionModel, tool_call

REPLAY_DIR = Path(__file__).resolve().parent / "replay"
"""The recorded replies, one JSON file each: ``replay/<model>/<request hash>.json``."""

STAND_IN = "scripted-stand-in-for-claude"
"""The stand-in's model name: the first half of every replay key. It is not a real
model name on purpose, so recorded stand-in replies can never pass for Claude's."""

PRICED_AS = al.llm.DEFAULT_MODEL
"""The stand-in's tokens are priced as this model's (what the recording 'cost')."""

GOAL = (
    "Compare flipper length across the three penguin species and write a short, "
    "checked finding for a field guide"
)
CONSTRAINTS = [
    "Use only the tools listed; the penguin table is the only source of numbers.",
    "Field notes may be unavailable: give every task that calls field_notes "
    "on_failure: replan.",
    'End with one task of kind "llm" (tool: null) that writes the finding; it may '
    "call species_stats (llm_tools) and answers with the fields longest, "
    "margin_mm and finding (output_schema).",
]
MEASURE = "flipper_length_mm"


@cache
def _table() -> Any:
    import pandas as pd

    from argus_lab.demo import dataset_path

    return pd.read_csv(dataset_path())


@al.tool
def species_stats(species: str, measure: str) -> dict[str, Any]:
    """Count, mean and standard deviation of one measurement for one species.

    species: Adelie, Chinstrap or Gentoo. measure: a numeric column of the penguin
    table (bill_length_mm, bill_depth_mm, flipper_length_mm, body_mass_g).
    """
    df = _table()
    if measure not in df.columns or df[measure].dtype.kind not in "if":
        raise al.ToolError(f"no numeric column {measure!r} in the penguin table")
    col = df.loc[df["species"] == species, measure].dropna()
    if col.empty:
        raise al.ToolError(f"no penguins of species {species!r}")
    return {
        "species": species,
        "measure": measure,
        "n": int(col.size),
        "mean": round(float(col.mean()), 1),
        "sd": round(float(col.std()), 1),
    }


@al.tool
def island_range(species: str) -> dict[str, Any]:
    """The islands where a species was recorded, with how many penguins on each."""
    df = _table()
    counts = df.loc[df["species"] == species, "island"].value_counts()
    return {"species": species, "islands": {str(k): int(v) for k, v in counts.items()}}


@al.tool
def field_notes(species: str) -> str:
    """The field station's notes on a species (the archive is often offline)."""
    raise al.ToolError(
        f"the field-notes archive has no entry for {species!r} (the archive is "
        "being migrated)"
    )


TOOLS = [species_stats, island_range, field_notes]

# ------------------------------------------------------------ the stand-in's script

_STATS = {
    "id": "",
    "tool": "species_stats",
    "title": "",
    "args": {"species": "", "measure": MEASURE},
}
_FINAL_SCHEMA = {
    "type": "object",
    "required": ["longest", "margin_mm", "finding"],
    "properties": {
        "longest": {"type": "string", "description": "The species."},
        "margin_mm": {"type": "number", "description": "Lead over the runner-up."},
        "finding": {"type": "string", "description": "Two sentences."},
    },
}


def _stats_task(species: str) -> dict[str, Any]:
    return {
        **_STATS,
        "id": species.lower(),
        "title": f"{species} flippers",
        "args": {"species": species, "measure": MEASURE},
    }


def _finding_task(tid: str, extra: dict[str, str], deps_note: str) -> dict[str, Any]:
    return {
        "id": tid,
        "kind": "llm",
        "tool": None,
        "title": "Write the finding",
        "description": "Say which species has the longest flippers and by how "
        "much, check its body mass with species_stats, and write two sentences "
        f"for a field guide{deps_note}.",
        "expected_output": "longest, margin_mm and a two-sentence finding",
        "args": {
            "stats": ["${adelie.result}", "${chinstrap.result}", "${gentoo.result}"],
            **extra,
        },
        "llm_tools": ["species_stats"],
        "output_schema": _FINAL_SCHEMA,
    }


def _first_plan() -> dict[str, Any]:
    """The stand-in's first answer, with one mistake (a dependency typo), so the
    notebook can show the planner's validate-and-repair loop."""
    plan = _plan()
    plan["tasks"][-1] = {**plan["tasks"][-1], "deps": ["gentoo_stats"]}
    return plan


def _plan() -> dict[str, Any]:
    return {
        "tasks": [
            _stats_task("Adelie"),
            _stats_task("Chinstrap"),
            _stats_task("Gentoo"),
            {
                "id": "notes",
                "tool": "field_notes",
                "title": "Field notes on Gentoo",
                "args": {"species": "Gentoo"},
                "on_failure": "replan",
                # after the stats, so the replan request (which lists the tasks
                # already finished) is the same in every run: without it,
                # whether gentoo had finished when notes failed was a race
                "deps": ["adelie", "chinstrap", "gentoo"],
            },
            _finding_task("finding", {"notes": "${notes.result}"}, " using the notes"),
        ]
    }


def _replacement() -> dict[str, Any]:
    """The replan: island records replace the missing field notes."""
    return {
        "tasks": [
            {
                "id": "habitat",
                "tool": "island_range",
                "title": "Where Gentoo live",
                "args": {"species": "Gentoo"},
            },
            _finding_task(
                "finding_v2",
                {"habitat": "${habitat.result}"},
                " (mention the islands where the species lives)",
            ),
        ]
    }


_JSON_OBJECT = re.compile(r"\{[^{}\[\]]*(?:\{[^{}\[\]]*\}[^{}\[\]]*)*\}")


def _objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects written in a prompt (dependency results are JSON)."""
    out = []
    for m in _JSON_OBJECT.finditer(text):
        try:
            value = json.loads(m.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def _write_finding(request: ModelRequest) -> Any:
    prompt = request.messages[0].text
    found = _objects(prompt)
    stats = {o["species"]: o for o in found if o.get("measure") == MEASURE}
    ranked = sorted(stats.values(), key=lambda o: -o["mean"])
    top, second = ranked[0], ranked[1]
    if len(request.messages) == 1:  # first turn: check the body mass with the tool
        return tool_call(
            "species_stats",
            {"species": top["species"], "measure": "body_mass_g"},
            id="toolu_standin_mass",
        )
    result = next(
        b
        for b in request.messages[-1].content
        if isinstance(b, ToolResultBlock) and isinstance(b.content, str)
    )
    mass = json.loads(result.content)
    islands = next((o["islands"] for o in found if "islands" in o), {})
    where = " and ".join(sorted(islands)) or "several islands"
    margin = round(top["mean"] - second["mean"], 1)
    finding = (
        f"{top['species']} penguins have the longest flippers, {top['mean']} mm on "
        f"average (n={top['n']}), {margin} mm more than {second['species']} "
        f"penguins. They are also the heaviest ({mass['mean']:.0f} g on average) "
        f"and were recorded only on {where}."
    )
    return tool_call(
        "final_answer",
        {"longest": top["species"], "margin_mm": margin, "finding": finding},
        id="toolu_standin_final",
    )


def _sorted(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))


def stand_in(request: ModelRequest) -> Any:
    """Claude's part, scripted: plans, replans and writes the finding.

    Its tool inputs have their keys sorted: the JSON reply stores sort keys, so a
    replayed reply has sorted keys, and an argument order that differed between
    the recording and the replay would change the next prompt (a replay miss).
    """
    if request.purpose == "plan":
        first = request.messages[0].text
        if "failed for good" in first:
            plan, call_id = _replacement(), "toolu_standin_replan"
        elif len(request.messages) == 1:
            plan, call_id = _first_plan(), "toolu_standin_plan1"
        else:
            plan, call_id = _plan(), "toolu_standin_plan2"
        return tool_call("submit_plan", _sorted(plan), id=call_id)
    reply = _write_finding(request)
    return tool_call(reply.name, _sorted(reply.input), id=reply.id)


def stand_in_model() -> FunctionModel:
    """The stand-in as a model (what ``ARGUS_NB03_RECORD=1`` records)."""
    return FunctionModel(
        stand_in, name=STAND_IN, prices={STAND_IN: al.llm.price_for(PRICED_AS)}
    )


class Counted:
    """Wraps a model and counts the requests that reach it (a fork's should be 0)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.requests = 0

    @property
    def name(self) -> str:
        """The inner model's name (so replay keys are unchanged)."""
        return self.inner.name

    def __repr__(self) -> str:
        return f"Counted({self.inner!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Counts the request and passes it on."""
        self.requests += 1
        return await self.inner.complete(request)


def recorded_cost_usd(model: str, request_hash: str) -> float | None:
    """What a replayed call cost when it was recorded (None if not recorded)."""
    value = ReplyCache(REPLAY_DIR).store.get(ReplyCache.key(model, request_hash))
    return None if value is None else value["response"].get("cost_usd")
