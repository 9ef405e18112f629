"""Loading the user's code an ``argus`` command needs: tools, planners, options.

Tools are code, so they are not stored with a session: ``--tools`` names a module
or a .py file holding them (``--planner`` an HTN domain or planner), and a demo
session gets the demo's. A module that fails to import is reported in one short
block (file:line, the line, the error), not a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from argus_lab.cli._common import UsageError, open_session

if TYPE_CHECKING:
    from argus_lab.workspace import Workspace

__all__ = ["load_planner", "load_tools", "needs_tools", "session_setup"]


def load_tools(specs: Sequence[str]) -> list[Any]:
    """Import modules (names or .py paths) and collect their Tool objects.

    A module's ``TOOLS`` list wins; otherwise every module-level Tool is taken.

    Raises:
        UsageError: A module cannot be imported or holds no tools.
    """
    from argus_lab.tools.registry import Tool

    out: list[Any] = []
    names = [x.strip() for s in specs for x in s.split(",") if x.strip()]
    if specs and not names:
        raise UsageError(
            "--tools: name a module or a .py file holding the plan's tools"
        )
    for spec in names:
        mod = _import(spec, "--tools")
        found = getattr(mod, "TOOLS", None)
        if found is None:
            found = [v for v in vars(mod).values() if isinstance(v, Tool)]
        if not found:
            raise UsageError(
                f"--tools: module {spec!r} has no tools (decorate functions with "
                "@argus_lab.tool or list them in TOOLS)" + _shadowed(spec, mod)
            )
        out.extend(found)
    return out


def _import(spec: str, flag: str) -> Any:
    if spec.endswith(".py") or os.sep in spec:
        path = Path(spec)
        if not path.exists():
            raise UsageError(f"{flag}: file {spec!r} does not exist")
        if path.is_dir():
            raise UsageError(
                f"{flag}: {spec!r} is a folder: give a .py file, or a package's "
                "module name (run from the folder that holds it)"
            )
        mspec = importlib.util.spec_from_file_location(path.stem, path)
        if mspec is None or mspec.loader is None:
            raise UsageError(f"{flag}: cannot import {spec!r}")
        mod = importlib.util.module_from_spec(mspec)
        sys.modules[path.stem] = mod
        try:
            mspec.loader.exec_module(mod)
        except Exception as e:
            sys.modules.pop(path.stem, None)
            raise UsageError(_import_error(flag, spec, e)) from None
        return mod
    try:
        return _import_module(spec)
    except ModuleNotFoundError as e:
        if e.name is not None and not (spec + ".").startswith(e.name + "."):
            # Found, but it imports something missing: say where.
            raise UsageError(_import_error(flag, spec, e)) from None
        hint = f"; did you mean {spec}.py?" if Path(f"{spec}.py").is_file() else ""
        raise UsageError(f"{flag}: cannot import module {spec!r}: {e}{hint}") from None
    except Exception as e:
        raise UsageError(_import_error(flag, spec, e)) from None


def _shadowed(spec: str, mod: Any) -> str:
    """A hint when ``spec`` named another module than the NAME.py here (one
    already imported, such as the standard library's ``json``)."""
    here = Path(f"{spec}.py")
    where = getattr(mod, "__file__", None)
    if not here.is_file() or (where and Path(where).resolve() == here.resolve()):
        return ""
    return f"; that is {where or 'a built-in module'}: did you mean {spec}.py?"


def _import_module(name: str) -> Any:
    """Import ``name`` with the current folder first on the import path, as
    ``python -m`` has it (the ``argus`` script's own folder is there instead),
    for this import only."""
    here = os.getcwd()
    sys.path.insert(0, here)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(here)  # the first occurrence: the one put there


def _import_error(flag: str, spec: str, e: Exception) -> str:
    """One short block: where the module failed (file:line), the line, the error."""
    import traceback

    if isinstance(e, SyntaxError):
        where = f"{e.filename}:{e.lineno}"
        code = (e.text or "").rstrip("\n")
        what = f"SyntaxError: {e.msg}"
    else:
        frames = traceback.extract_tb(e.__traceback__)
        # The deepest frame outside importlib's machinery is the user's line.
        mine = [f for f in frames if "importlib" not in f.filename] or frames
        last = mine[-1] if mine else None
        where = f"{last.filename}:{last.lineno}" if last else spec
        code = (last.line or "") if last else ""
        what = f"{type(e).__name__}: {e}"
    text = f"{flag}: cannot import {spec!r}: {where}: {what}"
    return text + (f"\n    {code.strip()}" if code.strip() else "")


def load_planner(spec: str) -> Any:
    """``MODULE:NAME`` naming an HTNDomain or HTNPlanner -> an HTNPlanner."""
    from argus_lab.plan.domain import HTNDomain
    from argus_lab.plan.htn import HTNPlanner

    module, _, attr = spec.partition(":")
    if not attr:
        raise UsageError(f"--planner: give MODULE:NAME, not {spec!r}")
    obj = getattr(_import(module, "--planner"), attr, None)
    if isinstance(obj, HTNDomain):
        return HTNPlanner(obj)
    if isinstance(obj, HTNPlanner):
        return obj
    raise UsageError(f"--planner: {spec} is not an HTNDomain or HTNPlanner")


def session_setup(
    ws: Workspace, name: str, args: argparse.Namespace, **open_options: Any
) -> dict[str, Any]:
    """Options to reopen a session with: its tools (and planner, policies).

    Tools are code and are not stored. ``--tools`` (and ``--planner``) name them;
    without them, a demo session gets the demo's tools, planner and policies.

    Raises:
        UsageError: The session needs tools and none were named.
    """
    opts: dict[str, Any] = {}
    if getattr(args, "concurrency", None):
        opts["concurrency"] = args.concurrency
    if args.tools:
        opts["tools"] = load_tools(args.tools)
        if args.planner:
            opts["planner"] = load_planner(args.planner)
        return opts
    from argus_lab.demo.runner import is_demo_plan, session_options

    with open_session(ws, name, **open_options) as s:
        plan = s.plan
    if is_demo_plan(plan):
        return session_options() | opts
    names = _tool_names(plan)
    if not names:
        return opts
    raise UsageError(
        f"session {name!r} needs its tools: --tools MODULE_OR_FILE (it uses "
        f"{', '.join(names)})"
    )


def _tool_names(plan: Any) -> list[str]:
    """The tools a plan's tasks call (lazy HTN compounds aside), sorted."""
    from argus_lab.plan.graph import EXPAND_TOOL

    return sorted({t.tool for t in plan.tasks if t.tool and t.tool != EXPAND_TOOL})


def needs_tools(plan: Any) -> bool:
    """Whether reopening a session of ``plan`` needs ``--tools`` (a demo's not)."""
    from argus_lab.demo.runner import is_demo_plan

    return not is_demo_plan(plan) and bool(_tool_names(plan))
