"""The runtime: a Session is a thin facade over parts with one job each.

Who calls whom (arrows are calls; every part gets what it needs in its
constructor, wired in assembly.py; none inherits from another or touches
another's private names)::

    Session (session.py)  public methods, argument checks
      ├─▶ RunDriver (driver.py)      carries each call to the private loop
      │     │                        thread (loop.py): waits or runs in the
      │     │                        background; Ctrl-C becomes a pause
      │     ▼
      │   RunLoop (engine.py)        lease around each call, crash recovery
      │     │                        (FailurePolicy.after_interrupt), the
      │     │                        run/step loops (a step that ends without
      │     │                        awaiting needs no asyncio Task)
      │     ├─▶ RunEnd (ending.py)   how a run ends: its status, committed
      │     ├─▶ Scheduler (scheduler.py)   ready tasks, critical path first (pure)
      │     ├─▶ Supervisor.expand (supervisor.py)   lazy HTN compounds
      │     └─▶ AttemptRunner (attempt.py)   ONE attempt: gate, intent, call
      │           │                     (a quick sync call inline: call_inline)
      │           ├─▶ gates.py   ends before a call: a fork's replay, approvals
      │           ├─▶ LlmTaskRunner (llm_task.py)   an LLM task's tool: the model
      │           │                                 loop, replay cache, cost
      │           ├─▶ BudgetChecker (budget.py)     limits before a step (pure check)
      │           ├─▶ run_attempt (executor.py)     the call → a typed Outcome
      │           │                                 (outcome.py)
      │           └─▶ Settler (settle.py)   carries out the decision:
      │                 ├─▶ FailurePolicy (policy.py)   Outcome → Decision (pure)
      │                 ├─▶ Supervisor remedies   repair / fallback / replan
      │                 └─▶ MemoryFeed (remember.py)  results and lessons
      ├─▶ Actions (actions.py)       a person's retry / skip / approve / reject
      │                              (a rejection goes to the Settler too)
      ├─▶ Closer (shutdown.py)       close() and the process's exit (atexit of
      │                              threads, SIGTERM, a kernel's shutdown):
      │                              stop, a grace period, then RunLoop.abandon
      └─▶ SessionState (state.py)    records, plan, usage; commit()
                 ▲
                 └── every part above writes ONLY through SessionState.commit,
                     which holds the Lease (lease.py) and is the store's one
                     writer; Signals (signals.py) carry pause and wake-up.

- Where does an attempt's outcome get decided? In **policy.py**:
  ``FailurePolicy.decide`` matches the typed outcome (Succeeded, Failed(kind),
  TimedOut, InDoubt, Rejected, OverBudget; Interrupted on recovery; ShutDown,
  never a failure, when the session or its process shuts down) and
  returns a decision (accept, retry later, ask, stop for budget, give up with
  remedies, then fail or skip); settle.py only carries it out.
- Who writes to the store? **state.py**: ``SessionState.commit`` (records,
  events, metadata, plan and lease in one transaction), and nothing else.

Views that live above the runtime (DataFrames, static HTML) are registered in
views.py by the root package, so the runtime never imports them. Executors
that run sync tools elsewhere (``DaskExecutor``, dask.py) implement the
``RemoteExecutor`` protocol; models, executors and planners are typed by the
protocols in options.py (``Model`` from ``argus_lab.llm``).
"""
