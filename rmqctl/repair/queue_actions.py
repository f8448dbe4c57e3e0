"""Plan actions for consume-queue files and their ext files (shared by recover and rebuild)."""
from __future__ import annotations

from rmqctl.repair.plan import Action, rel_path


def cq_why(st) -> str:
    parts = []
    if st.dropped_units:
        parts.append(f"{st.dropped_units} unit(s) at or after the cut / after the first invalid unit removed")
    if st.added:
        parts.append(f"{st.added} missing unit(s) dispatched from the commitlog")
    return "; ".join(parts) or "tail zero-filled"


def ext_actions(store, plan, st, topic, qid) -> None:
    """The consumequeue_ext files of a queue's units (enableConsumeQueueExt)."""
    for path, staged in st.ext_files():
        plan.add(Action("write_file" if path.exists() else "create_file", rel_path(store, path),
                        f"consume queue ext {topic}/{qid}: ext units of the consume-queue units written",
                        group="consumequeue", payload=(path, staged)))
    for f in st.ext_delete_files():
        plan.add(Action("delete_file", rel_path(store, f.path), f"consume queue ext {topic}/{qid}: after the last ext "
                        "unit", group="consumequeue", payload=f.path))
