"""The ``%%argus`` cell magic and the ``%argus`` line magic.

Sugar over the public API: every command is one or two calls of it (see the
docstrings of :meth:`ArgusMagics.argus_cell` and :meth:`ArgusMagics.argus_line`,
which ``%%argus?`` and ``%argus?`` show). Defaults are configurable::

    %config ArgusMagics.workspace = "./runs"     # else $ARGUS_HOME, else ./.argus
    %config ArgusMagics.tools = "my_tools"       # default --tools
    %config ArgusMagics.session_options = {"concurrency": 2}

This module parses the commands and calls the API; what a cell's text, goal,
``--tools`` and ``--domain`` mean is read in ``_notebook.py``, and the one
Session object per session the kernel holds is kept in ``_live.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import traitlets
from IPython.core import magic_arguments as _magic_arguments
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

import argus_lab as al
from argus_lab.errors import ArgusError
from argus_lab.jupyter._live import LiveSessions, missing_tools
from argus_lab.jupyter._notebook import find_object, find_tools, interpolate, plan_cell
from argus_lab.jupyter.display import PlanView
from argus_lab.tools.registry import Tool

if TYPE_CHECKING:
    import pandas as pd

    from argus_lab.jupyter.widget import GraphWidget

__all__ = ["ArgusMagics", "interpolate", "load_ipython_extension"]

F = TypeVar("F", bound=Callable[..., Any])
_ma: Any = _magic_arguments  # IPython's magic_arguments is untyped


def magic_arguments(name: str) -> Callable[[F], F]:
    """IPython's ``@magic_arguments``, typed."""
    return _ma.magic_arguments(name=name)  # type: ignore[no-any-return]


def argument(*args: Any, **kwargs: Any) -> Callable[[F], F]:
    """IPython's ``@argument`` (argparse's add_argument), typed."""
    return _ma.argument(*args, **kwargs)  # type: ignore[no-any-return]


def _named(marker: Any, name: str) -> Callable[[F], F]:
    # IPython types @cell_magic(name) as returning a union; it is a decorator.
    deco: Callable[[F], F] = marker(name)
    return deco


def parse_argstring(magic: Callable[..., Any], line: str) -> Any:
    """Parses a magic's line; raises UsageError on bad arguments."""
    return _ma.parse_argstring(magic, line)


_TASK_COMMANDS = ("approve", "reject", "retry", "skip")


@magics_class
class ArgusMagics(Magics):
    """``%%argus`` / ``%argus``: plan, run, inspect and fork sessions from cells."""

    workspace = traitlets.Unicode(
        "", help="Workspace folder; empty: $ARGUS_HOME, else ./.argus."
    ).tag(config=True)
    planner = traitlets.Enum(
        ["auto", "yaml", "htn", "llm"],
        default_value="auto",
        help="Default --planner; auto: YAML plan bodies as they are, goal text "
        "with --domain by HTN, else by the LLM planner.",
    ).tag(config=True)
    model = traitlets.Unicode("", help="Default --model for the LLM planner.").tag(
        config=True
    )
    tools = traitlets.Unicode(
        "",
        help="Default --tools (comma-separated variables or modules); empty: "
        "every al.tool defined in the notebook.",
    ).tag(config=True)
    mode = traitlets.Enum(
        ["show", "run", "step"],
        default_value="show",
        help="What a %%argus cell does without --run/--step/--plan-only.",
    ).tag(config=True)
    height = traitlets.Int(
        440,
        help="Largest height of the graph canvas in pixels (it follows the graph "
        "up to this; the widget's Expand button goes beyond).",
    ).tag(config=True)
    session_options = traitlets.Dict(
        help="Options for new and opened sessions (concurrency, approvals, ...)."
    ).tag(config=True)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self._sessions = LiveSessions()
        self._planner: Any = None  # the HTN planner of the cell being run
        # The widget each cell last showed: a rerun replaces its output, so the
        # old widget stops listening (one subscription per displayed widget).
        self._shown: dict[str, GraphWidget] = {}
        self._cell_id: str | None = None
        if shell is not None:
            shell.events.register("pre_run_cell", self._pre_run_cell)

    def _pre_run_cell(self, info: Any) -> None:
        self._cell_id = getattr(info, "cell_id", None)

    # -- %%argus -----------------------------------------------------------------

    @magic_arguments(name="%argus")  # usage line: %%argus
    @argument("name", nargs="?", help="Session name (default: from the goal).")
    @argument(
        "--planner",
        choices=["auto", "yaml", "htn", "llm"],
        help="How the body becomes a plan (default: ArgusMagics.planner).",
    )
    @argument("--domain", help="HTN domain: MODULE:OBJ or a notebook variable.")
    @argument(
        "--tools",
        help="Comma-separated notebook variables (a tool or a list of tools) or "
        "importable modules; default: every al.tool defined in the notebook.",
    )
    @argument("--model", help="Model for the LLM planner.")
    @argument("--run", action="store_true", help="Start running in the background.")
    @argument(
        "--new", action="store_true", help="A new session even if one has this plan."
    )
    @argument("--step", action="store_true", help="Run one step now.")
    @argument(
        "--plan-only",
        action="store_true",
        help="Only build and show the plan; VAR gets the Plan.",
    )
    @argument(
        "--max-cost",
        type=float,
        help="Pause before spending more USD (s.set_budget(max_cost_usd=...)).",
    )
    @argument(
        "--max-steps",
        type=int,
        help="Pause after this many task attempts (s.set_budget(max_steps=...)).",
    )
    @argument("-o", "--output", dest="var", help="Bind the Session to this variable.")
    @_named(cell_magic, "argus")
    def argus_cell(self, line: str, cell: str) -> GraphWidget | PlanView:
        """Plan a goal (or take a YAML plan) and show it as a live graph widget.

        The body is a YAML plan (a mapping with ``tasks:``) or goal text;
        ``{var}`` is replaced by the notebook variable ``var``. Returns the
        widget bound to the new Session (the widget's ``.session``); ``-o VAR``
        binds the Session to VAR. Re-running a cell shows the same session
        (by NAME, else the newest with the cell's plan, after a kernel restart
        too: no side effect repeats; ``--new`` makes another). Tools are
        refreshed; a different plan under an existing NAME is an error.

        Line magics (see ``%argus?``)::

            %argus ls
            %argus open NAME | resume NAME | fork NAME --at TASK
            %argus df NAME [tasks|events|llm]
        """
        a = parse_argstring(self.argus_cell, line)
        _check_var(a.var, "%%argus")
        modes = [m for m in ("run", "step", "plan_only") if getattr(a, m)]
        if len(modes) > 1:
            flags = ", ".join("--" + m.replace("_", "-") for m in modes)
            raise UsageError(
                f"%%argus: choose one of --run, --step, --plan-only (got {flags})"
            )
        if a.max_cost is not None and a.max_cost <= 0:
            raise UsageError(f"%%argus: --max-cost must be positive, got {a.max_cost}")
        if a.max_steps is not None and a.max_steps < 1:
            raise UsageError(
                f"%%argus: --max-steps must be at least 1, got {a.max_steps}"
            )
        ns = self._ns()
        body = interpolate(cell or "", ns)
        if not body.strip():
            raise UsageError("%%argus: the cell is empty; write a goal or a YAML plan")
        tools = self._tools(a.tools)
        self._planner = None
        plan, self._planner = plan_cell(
            body,
            planner=a.planner or self.planner,
            name=a.name,
            domain=a.domain,
            model=a.model or self.model,
            tools=tools,
            ns=ns,
        )
        if a.plan_only:
            if a.var:
                ns[a.var] = plan
            return PlanView(plan)
        session = self._sessions.for_plan(
            self._ws(), plan, tools, a.name, self._options(), new=a.new
        )
        if a.var:
            ns[a.var] = session
        limits = {"max_cost_usd": a.max_cost, "max_steps": a.max_steps}
        if any(v is not None for v in limits.values()):
            session.set_budget(**{k: v for k, v in limits.items() if v is not None})
        w = self._widget(session, a.var, f"%%argus {line}\n{cell}")
        mode = modes[0] if modes else self.mode
        if mode == "run":
            w._run_or_follow()
        elif mode == "step":
            w.act("step").result()
        return w

    # -- %argus --------------------------------------------------------------

    @magic_arguments(name="argus")
    @argument(
        "command",
        choices=["ls", "open", "resume", "fork", "df", *_TASK_COMMANDS],
    )
    @argument("name", nargs="?", help="Session name or id.")
    @argument(
        "what",
        nargs="?",
        help="For df: tasks (default), events or llm; for approve, reject, "
        "retry and skip: the TASK.",
    )
    @argument("--at", help="For fork: the task to start again from.")
    @argument("--tools", help="Tools for open/resume/fork, as for %%argus.")
    @argument(
        "--domain",
        help="For open/resume/fork of an HTN session: MODULE:OBJ of its domain "
        "(lazy compounds expand and failed subtrees backtrack with it).",
    )
    @argument("-o", "--output", dest="var", help="Bind the Session to this variable.")
    @_named(line_magic, "argus")
    def argus_line(self, line: str) -> Any:
        """List, open, resume, fork and tabulate sessions.

        ``%argus ls``: the workspace's sessions as a DataFrame.
        ``%argus open NAME``: a widget on the session, as it stands.
        ``%argus resume NAME``: the same, and run it on in the background.
        ``%argus fork NAME --at TASK``: a new session that keeps results from
        before TASK, shown in a widget (``-o VAR`` binds the fork).
        ``%argus df NAME [tasks|events|llm]``: one of the session's DataFrames.
        ``%argus approve NAME TASK`` (and ``reject``, ``retry``, ``skip``): one
        call of the Session method on the named session, no variable needed;
        like the widget's Approve, an approval a run paused for alone restarts
        it in the background.
        The cell magic ``%%argus`` is documented under ``%%argus?``.
        """
        a = parse_argstring(self.argus_line, line)
        _check_var(a.var, "%argus")
        self._planner = None
        if a.domain:
            if a.command not in ("open", "resume", "fork"):
                raise UsageError("--domain goes with %argus open, resume or fork")
            self._planner = al.HTNPlanner(find_object(a.domain, "--domain", self._ns()))
        if a.command == "ls":
            if a.name:
                raise UsageError("%argus ls takes no name")
            return self._ls()
        if not a.name:
            raise UsageError(f"%argus {a.command} needs a session NAME (see %argus ls)")
        if a.command in _TASK_COMMANDS:
            return self._task_command(a.command, a.name, a.what)
        if a.what is not None and a.command != "df":
            raise UsageError(f"%argus {a.command}: unexpected argument {a.what!r}")
        if a.at is not None and a.command != "fork":
            raise UsageError("--at goes with %argus fork only")
        if a.command == "df":
            return self._df(a.name, a.what or "tasks")
        session = self._open(a.name, self._tools(a.tools))
        if a.command == "fork":
            try:
                session = session.fork(at=a.at)
            except KeyError as e:
                raise UsageError(f"%argus fork: {e.args[0]}") from None
            self._sessions.add(session)
        if a.var:
            self._ns()[a.var] = session
        w = self._widget(session, a.var, f"%argus {line}")
        if a.command == "resume":
            w._run_or_follow()
        return w

    def _task_command(self, command: str, name: str, task: str | None) -> None:
        if not task:
            raise UsageError(
                f"%argus {command} needs a TASK: %argus {command} NAME TASK"
            )
        s = self._open(name, self._tools(None))
        if task not in s.records:
            raise UsageError(f"%argus {command}: session {name!r} has no task {task!r}")
        # Read before approving: the run stopped for this approval alone.
        waited = (
            command == "approve"
            and not s.running
            and (s.reason or "").startswith("waiting for approval")
        )
        try:
            getattr(s, command)(task)
        except ArgusError as e:
            raise UsageError(f"%argus {command}: {e}") from None
        done = {"approve": "approved", "reject": "rejected", "retry": "pending again",
                "skip": "skipped"}[command]  # fmt: skip
        missing = missing_tools(s) if waited else []
        if missing:  # run now, the approved call would fail
            print(
                f"{name}: {task} {done}; to go on, define its tools "
                f"({', '.join(missing)}) here, then: %argus resume {name}"
            )
        elif waited and not s.pending_approvals():
            # As the widget's Approve does (and the widget's hint names this
            # magic): a run that paused only for this approval goes on.
            s.start()
            print(f"{name}: {task} {done}; the run goes on")
        else:
            print(f"{name}: {task} {done}")

    def _options(self) -> dict[str, Any]:
        """Session options: the configured ones, plus the planner just used."""
        opts = dict(self.session_options)
        if self._planner is not None and "planner" not in opts:
            opts["planner"] = self._planner
        return opts

    def _ls(self) -> pd.DataFrame:
        import pandas as pd

        rows = [
            {
                "name": i.name,
                "status": i.status,
                "tasks": i.n_tasks,
                "succeeded": i.counts.get("succeeded", 0),
                "failed": i.counts.get("failed", 0),
                "created": pd.Timestamp(i.created, unit="s", tz="UTC"),
                "parent": i.parent,
                "reason": i.reason,
            }
            for i in self._ws().sessions()
        ]
        cols = ["name", "status", "tasks", "succeeded", "failed", "created"]
        return pd.DataFrame(rows, columns=[*cols, "parent", "reason"])

    def _df(self, name: str, what: str) -> pd.DataFrame:
        if what not in ("tasks", "events", "llm"):
            raise UsageError(f"%argus df: choose tasks, events or llm, not {what!r}")
        s = self._open(name, self._tools(None))
        if what == "tasks":
            return s.tasks_df()
        if what == "events":
            return s.events_df()
        llm_df = getattr(al.analysis, "llm_calls_df", None)
        if callable(llm_df):
            frame: pd.DataFrame = llm_df(s)
            return frame
        ev = s.events_df()
        return ev[ev["kind"] == "llm_call"].reset_index(drop=True)

    # -- helpers -------------------------------------------------------------

    def _ns(self) -> dict[str, Any]:
        if self.shell is None:
            raise UsageError("%argus needs an IPython shell")
        ns: dict[str, Any] = self.shell.user_ns
        return ns

    def _ws(self) -> al.Workspace:
        return self._sessions.workspace(self.workspace)

    def _open(self, name: str, tools: dict[str, Tool]) -> al.Session:
        return self._sessions.open(self._ws(), name, tools, self._options())

    def _tools(self, spec: str | None) -> dict[str, Tool]:
        return find_tools(spec if spec is not None else self.tools, self._ns())

    def _widget(self, session: al.Session, var: str | None, source: str) -> GraphWidget:
        """A widget for the cell; the one this cell showed before is closed."""
        from argus_lab.jupyter.widget import GraphWidget

        key = self._cell_id or source
        old = self._shown.pop(key, None)
        if old is not None:
            old.close()
        w = GraphWidget(session, height=self.height, hint_var=var or "")
        self._shown[key] = w
        return w


def load_ipython_extension(ipython: Any) -> None:
    """Registers ``%%argus`` / ``%argus`` (``%load_ext argus_lab``)."""
    # Magics adds itself to ipython.configurables, so %config ArgusMagics.x works.
    ipython.register_magics(ArgusMagics(ipython))


def _check_var(var: str | None, magic: str) -> None:
    """``-o VAR`` names a variable the Session can be bound to (``-o 5`` or
    ``-o my-session`` would be a key of the namespace no code can read)."""
    import keyword

    if var is not None and (not var.isidentifier() or keyword.iskeyword(var)):
        raise UsageError(
            f"{magic}: -o takes a Python variable name to bind the Session to, "
            f"got {var!r}"
        )
