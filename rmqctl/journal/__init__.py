"""The quarantine journal: a service below both ``config/`` and ``repair/`` (docs/architecture.md).

* ``core``: the journal of one operation (``Journal``), its layout and rules (module doc); it
  re-exports ``files`` and ``undo`` for callers;
* ``files``: durable writes, streamed hashes and checked copies the journal is built on;
* ``undo``: reading journals back, ``undo``, and the roll-back of an operation a killed run left
  unfinished (``settle_unfinished``);
* ``ops``: the same entry kinds for GiB-sized store files (hard-link saves, streamed ranges, files
  built in staging);
* ``transaction``: lock, settle, journal, run, commit -- and roll back with one line naming the
  errno on any failure. Every command that changes a store runs inside it.

Imports nothing from ``config/``, ``repair/`` or ``cli/``.
"""
