"""consumequeue/<topic>/<queueId>/<20-digit byte offset>: 20-byte units (docs/store-format.md, "Consume queue").

Unit i (logical queue offset i) sits at byte i*20 of the queue's logical stream. Default file size
300,000 units = 6,000,000 bytes; file names are multiples of the file size.
"""
from construct import Int32sb, Int64sb, Struct

UNIT_SIZE = 20
DEFAULT_FILE_SIZE = 300_000 * UNIT_SIZE
PRE_BLANK_SIZE = 0x7FFFFFFF  # fillPreBlank: (offset 0, size Integer.MAX_VALUE, tagsCode 0)

ConsumeQueueUnit = Struct(
    "physical_offset" / Int64sb * "commitlog PHYSICALOFFSET of the message",
    "size" / Int32sb * "TOTALSIZE of the message record (0x7FFFFFFF in a pre-blank unit)",
    "tags_code" / Int64sb * "hash of TAGS (sign-extended); delivery time on SCHEDULE_TOPIC_XXXX; "
                            "a consumequeue_ext address when <= -2147483649",
)
