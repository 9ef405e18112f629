"""Tools: what a plan's tasks call.

- ``registry``: the ``@tool`` decorator, ``Tool`` and ``ToolContext``.
- ``approval``: approval policies (which calls wait for a person).
- ``builtin``: ``al.builtin_tools(...)``: the sandboxed ``python`` tool
  (``sandbox``), file tools confined to the session's folder (``files``), and
  the memory tools (which live with the memory, store/memory_tools.py).
"""
