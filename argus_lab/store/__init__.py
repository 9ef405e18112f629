"""Storage: what sessions and the workspace keep on disk.

- ``checkpoints``: one diskcache per session (records, events, the lease), JSON
  in a versioned, checksummed envelope, with migrations between versions.
- ``folders``: a workspace's session folders (which exist, sizes, removal).
- ``artifacts``: content-addressed files for large results and produced files.
- ``memory`` (LanceDB, imported on first use) with ``chunking``, ``embedding``
  and ``memory_provenance``; ``memory_tools``: ``memory_add`` and
  ``memory_search`` as built-in tools.
"""
