"""store/abort and store/lock (docs/store-format.md, "Abort and lock").

abort: its presence at start-up means abnormal recovery. Empty (4.x) or the broker PID as decimal
text (5.x, with an empty abort.bak side file). lock: 4 ASCII bytes "lock" (or empty); what matters
is the fcntl lock a running broker holds on byte 0, not the content.
"""
from construct import Const, GreedyBytes, Struct

LOCK_CONTENT = b"lock"

Abort = Struct(
    "pid_text" / GreedyBytes * "empty (4.x) or the broker's PID as decimal text (5.x)",
)
Lock = Struct(
    "content" / GreedyBytes * "\"lock\" written by the broker at start (may be empty)",
)
LockWritten = Struct("content" / Const(LOCK_CONTENT) * "\"lock\"")
