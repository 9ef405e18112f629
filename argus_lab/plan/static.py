"""Plans written by hand: YAML or JSON text, files, or dicts."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from argus_lab.errors import PlanError
from argus_lab.model import Task
from argus_lab.plan._model import Plan
from argus_lab.plan._text import check_json, load_yaml, read_text
from argus_lab.plan.graph import sub_references
from argus_lab.redact import MASK, Redactor, reference_only

__all__ = [
    "coerce_plan",
    "masked_error",
    "masked_plan",
    "plan_from_dict",
    "plan_from_yaml",
    "plan_to_yaml",
    "refuse_literal_secrets",
]


def coerce_plan(plan: Plan | dict[str, Any] | str | Path) -> Plan:
    """A Plan from a Plan, a dict, YAML text or the path of a YAML/JSON file."""
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, dict):
        return Plan.from_dict(plan)
    if isinstance(plan, str | Path):
        return Plan.from_yaml(plan)
    raise PlanError(
        "plan must be a Plan, a dict, YAML text or a file path, "
        f"not {type(plan).__name__}"
    )


def masked_plan(plan: Plan, red: Redactor) -> Plan:
    """``plan`` as the store keeps it: secrets in its texts (the goal, the
    constraints, a task's title, description or expected output) masked.

    A live session shows its plan this way: shown as written, a secret in a
    title reached ``tasks_df``, the widget and a notebook's saved output,
    though the session reopened showed ``[REDACTED]``. References are kept,
    and literal secrets in arguments are refused (``refuse_literal_secrets``).
    """
    text = plan.model_dump_json(exclude_defaults=True)
    if "\\" not in text and not red.needed(text):  # as the store's scrubbed()
        return plan
    data = json.loads(text)
    masked = red.value(data)
    return plan if masked == data else Plan.model_validate(masked)


def masked_error(e: PlanError, red: Redactor) -> PlanError:
    """``e`` with secrets masked in its message and problems, in place: a
    plan's error quotes it (a dependency, a tool, a reference), and a
    notebook saves the error with its output."""
    if red.needed(e.message) or any(map(red.needed, e.problems)):
        e.message = red.text(e.message)
        e.args = (e.message,)
        e.problems = [red.text(x) for x in e.problems]
    return e


def refuse_literal_secrets(plan: Plan | Iterable[Task], red: Redactor) -> None:
    """Raises PlanError for a task id or argument holding a secret ``red`` knows.

    Takes a whole plan, or only the tasks a plan change adds or alters (a
    replanner's or HTN repair's patch, a fallback): the rest was checked when
    it entered the plan.
    """
    # A secret written into a plan would be stored with it; a reference is not.
    for t in plan.tasks if isinstance(plan, Plan) else plan:
        if red.needed(t.id):
            # Task ids are keys in the checkpoint: masking would merge tasks.
            raise PlanError(
                "a task id holds a secret (it matches an API key, token or "
                "password, or a secret environment variable's value); ids are "
                "stored as keys and cannot be masked. Choose another id"
            )
        for k, v in t.args.items():
            if red.needed(k):  # masked when stored: the stored task would differ
                raise PlanError(
                    f"task {t.id!r}: an argument's name holds a secret (it matches "
                    "an API key, token or password, or a secret environment "
                    "variable's value); names are stored as they are. Rename it, "
                    "and pass the secret as a value through ${env.NAME}"
                )
            # With its name ("password": "x" too); a reference is no secret.
            arg = {k: _literal(v)}
            if red.may_hold_secrets(json.dumps(arg)) and red.value(arg) != arg:
                if red.value(arg[k]) == arg[k]:  # only its name makes it secret
                    raise PlanError(
                        f"task {t.id!r}: argument {k!r} holds a secret by its name: "
                        "text under a name like a key, token, password or auth "
                        "field is stored masked, so a resumed task would get "
                        f"{MASK!r}. Write ${{env.NAME}} instead (read when the "
                        "task runs, never stored), or rename the tool's parameter "
                        "if it is no secret"
                    )
                raise PlanError(
                    f"task {t.id!r}: argument {k!r} holds a secret (it matches an "
                    "API key, token or password, or a secret environment "
                    "variable's value); it would be stored with the plan. Write "
                    "${env.NAME} instead: it is read when the task runs and never "
                    "stored"
                )


def _literal(v: Any) -> Any:
    """``v`` with its ``${...}`` references taken out: what the plan states
    literally, which is what is stored. A string of references alone (an auth
    scheme before them allowed, "Bearer ${env.T}") is empty; the text beside
    a reference stays ("x${env.K}" under a secret name would be stored masked,
    reference and all, and break when the session is reopened)."""
    if isinstance(v, str):
        if "${" not in v:
            return v
        if reference_only(v):
            return ""
        return sub_references(v, lambda _r, _t: "", unescape=False)
    if isinstance(v, dict):
        return {k: _literal(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_literal(x) for x in v]
    return v


def _field_path(loc: tuple[Any, ...], data: dict[str, Any]) -> str:
    # Name the task by id rather than by list index: "tasks[3] (id 'x').retries".
    parts: list[str] = []
    tasks = data.get("tasks") if isinstance(data, dict) else None
    i = 0
    while i < len(loc):
        p = loc[i]
        if p == "tasks" and i + 1 < len(loc) and isinstance(loc[i + 1], int):
            idx = loc[i + 1]
            tid = None
            if isinstance(tasks, list) and idx < len(tasks):
                t = tasks[idx]
                tid = t.get("id") if isinstance(t, dict) else None
            parts.append(f"task {tid!r}" if tid else f"tasks[{idx}]")
            i += 2
            continue
        parts.append(str(p))
        i += 1
    return ".".join(parts)


def plan_from_dict(
    data: dict[str, Any],
    *,
    name: str | None = None,
    lines: dict[int, int] | None = None,
) -> Plan:
    """Builds a Plan from plain data, raising PlanError that names each bad field.

    Only PlanError escapes, whatever ``data`` is (see ``_text.check_json``).
    ``name`` and ``lines`` (from YAML) let messages say where a task was written.
    """
    if not isinstance(data, dict):
        where = f"{name}: " if name else ""
        got = "nothing" if data is None else type(data).__name__
        if isinstance(data, str) and name == "<plan text>" and "\n" not in data:
            # One word of text: most likely a file name Argus did not take as one.
            got = (
                f"the text {data[:80]!r} (a file name must end in .yaml, .yml or "
                ".json, or be given as a Path)"
            )
        raise PlanError(
            f"{where}a plan must be a mapping with 'goal' and 'tasks', got {got}"
        )
    check_json(data, name=name, lines=lines)
    if "tasks" not in data:
        hint = "".join(
            f"; {k!r}: {did_you_mean(k, Plan.model_fields)}"
            for k in data
            if k not in Plan.model_fields
        )
        raise PlanError(
            "a plan needs a 'tasks' list (each task with an id and a tool)" + hint
        )
    try:
        plan = Plan.model_validate(data)
    except ValidationError as e:
        msgs = [
            _where(err["loc"], data, name, lines or {})
            + f"{_field_path(err['loc'], data)}: {_message(err)}"
            for err in e.errors()
        ]
        raise PlanError("invalid plan:\n- " + "\n- ".join(msgs)) from None
    return plan.validate_against(None)


_ID_RULE = (
    "a task id is 1 to 200 letters, digits and _ . / : - (ASCII), starting with "
    "a letter, digit or _"
)


_SYNONYMS = {
    "dependencies": "deps",
    "depends_on": "deps",
    "depends": "deps",
    "requires": "deps",
    "needs": "deps",
    "after": "deps",
    "arguments": "args",
    "params": "args",
    "parameters": "args",
    "inputs": "args",
    "input": "args",
    "kwargs": "args",
    "retry": "retries",
    "max_retries": "retries",
    "name": "id",
    "task_id": "id",
    "action": "tool",
    "tool_name": "tool",
    "function": "tool",
    "timeout_s": "timeout",
    "objective": "goal",
    "steps": "tasks",
    "task": "tasks",
}
"""Keys people write (from other tools' plan formats) and the key Argus means."""


def did_you_mean(key: object, known: Iterable[str]) -> str:
    """`` (did you mean 'deps'?)`` for a mistyped key, or the keys allowed."""
    import difflib

    names = list(known)
    text = str(key)
    guess = _SYNONYMS.get(text.lower())
    if guess not in names:
        close = difflib.get_close_matches(text.lower(), names, n=1, cutoff=0.7)
        guess = close[0] if close else None
    if guess is not None:
        return f"unknown key; did you mean {guess!r}?"
    return "unknown key; allowed: " + ", ".join(names)


def _message(err: Any) -> str:
    # The id pattern's regex means nothing to a reader: say it in words.
    if err["type"] == "string_pattern_mismatch" and err["loc"][-1:] == ("id",):
        return _ID_RULE
    if err["type"] == "extra_forbidden" and len(err["loc"]) in (1, 3):
        model = Plan if len(err["loc"]) == 1 else Task
        return did_you_mean(err["loc"][-1], model.model_fields)
    if err["type"] == "value_error":  # our own sentence: not pydantic's prefix
        return str(err["msg"]).removeprefix("Value error, ")
    return str(err["msg"])


def _where(
    loc: tuple[Any, ...], data: dict[str, Any], name: str | None, lines: dict[int, int]
) -> str:
    # "plan.yaml:12: " for an error inside the task written at line 12.
    if not name:
        return ""
    tasks = data.get("tasks")
    if (
        len(loc) >= 2
        and loc[0] == "tasks"
        and isinstance(loc[1], int)
        and isinstance(tasks, list)
        and loc[1] < len(tasks)
        and (line := lines.get(id(tasks[loc[1]])))
    ):
        return f"{name}:{line}: "
    return f"{name}: "


def plan_from_yaml(text_or_path: str | Path) -> Plan:
    """Builds a Plan from YAML/JSON text or a file path; only PlanError escapes."""
    text, name = read_text(text_or_path)
    data, lines = load_yaml(text, name)
    return plan_from_dict(data, name=name, lines=lines)


def plan_to_yaml(plan: Plan) -> str:
    """Dumps a plan as YAML in the documented format, keys in a readable order."""
    import yaml

    return yaml.safe_dump(plan.to_dict(), sort_keys=False, allow_unicode=True)
