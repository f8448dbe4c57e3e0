"""5.1+ compaction store (docs/store-format.md, "Compaction"): compactionLog files hold commitlog-format
records (see commitlog.py);
compactionCq files hold BatchConsumeQueue units (see batch_consumequeue.py)."""
from rmqctl.formats.batch_consumequeue import BatchConsumeQueueUnit as CompactionCqUnit  # noqa: F401
from rmqctl.formats.commitlog import BlankRecord, MessageRecord  # noqa: F401

COMPACTION_LOG_DEFAULT_FILE_SIZE = 104_857_460
COMPACTION_CQ_DEFAULT_FILE_SIZE = 10_485_746


def compaction_log_size(compaction_mapped_file_size: int, cq_file_size: int) -> int:
    """CompactionLog.getCompactionLogSize: rounded to a multiple of the consume-queue file size."""
    n, rem = divmod(compaction_mapped_file_size, cq_file_size)
    if n < 5:
        return 5 * cq_file_size
    if 0 < rem < cq_file_size // 2:
        return n * cq_file_size
    return (n + 1) * cq_file_size
