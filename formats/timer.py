"""5.x timer store: timerwheel, timerlog/<20-digit>, config/timercheck (docs/store-format.md, "Timer store")."""
from construct import Int32sb, Int64sb, Struct

TIMER_WHEEL_TTL_DAY = 7
SLOTS_TOTAL = TIMER_WHEEL_TTL_DAY * 86400
WHEEL_SLOTS = 2 * SLOTS_TOTAL
SLOT_SIZE = 32
WHEEL_FILE_SIZE = WHEEL_SLOTS * SLOT_SIZE       # 38,707,200
TIMERLOG_UNIT_SIZE = 52
TIMERLOG_MIN_BLANK = 16
TIMERLOG_FILE_SIZE = 100 * 1024 * 1024
TIMERLOG_BLANK_MAGIC = -875286124
TIMERCHECK_FILE_SIZE = 4096
MAGIC_DEFAULT, MAGIC_ROLL, MAGIC_DELETE = 1, 2, 4

TimerWheelSlot = Struct(
    "time_secs" / Int64sb * "the slot's time in precision units (t / timerPrecisionMs), not ms",
    "first_pos" / Int64sb * "timerlog offset of the first unit (-1 = none)",
    "last_pos" / Int64sb * "timerlog offset of the last unit (-1 = none)",
    "num" / Int32sb * "units in the slot",
    "magic" / Int32sb * "unused (0)",
)
TimerLogUnit = Struct(
    "size" / Int32sb * "52",
    "prev_pos" / Int64sb * "timerlog offset of the previous unit of the same slot",
    "magic" / Int32sb * "1 default | 2 roll | 4 delete",
    "curr_write_time_ms" / Int64sb * "enqueue wheel time (ms)",
    "delayed_time" / Int32sb * "delayedTime - currWriteTime (ms)",
    "commitlog_offset" / Int64sb * "commitlog offset of the timer message",
    "commitlog_size" / Int32sb * "commitlog record size",
    "real_topic_hash" / Int32sb * "REAL_TOPIC.hashCode() (0 if absent)",
    "reserved" / Int64sb * "0",
)
TimerLogBlank = Struct(
    "size" / Int32sb * "bytes to the end of the file",
    "zero" / Int64sb * "0",
    "magic" / Int32sb * "0xCBD43194",
)
TimerCheckpoint = Struct(
    "last_read_time_ms" / Int64sb * "lastReadTimeMs",
    "last_timer_log_flush_pos" / Int64sb * "lastTimerLogFlushPos",
    "last_timer_queue_offset" / Int64sb * "offset in the rmq_sys_wheel_timer consume queue",
    "master_timer_queue_offset" / Int64sb * "masterTimerQueueOffset",
    "data_version_state_version" / Int64sb * "dataVersion.stateVersion",
    "data_version_timestamp" / Int64sb * "dataVersion.timestamp",
    "data_version_counter" / Int64sb * "dataVersion.counter",
)
