"""DLedger commitlog (broker option enableDLegerCommitLog=true): STORE/dledger-<selfId>/
(docs/store-format.md, "DLedger").

openmessaging DLedger 0.3.1.2 (the version both RocketMQ 4.9.7 and 5.3.3 depend on), DLedgerMmapFileStore:
  data/<20-digit start offset>   entries, each a 48-byte header + body; the broker's DLedgerCommitLog puts one
                                 message record (commitlog format) in each body, so a message's physical offset
                                 is entry pos + 48. A file too short for the next entry + 8 ends with a blank:
                                 magic -1, then the remaining length (the rest is left as it was).
  index/<20-digit>               32-byte units, unit i at byte i*32 (entry index i); default file size
                                 32 * 5 MiB = 160 MiB (the broker does not change it)
  checkpoint (+ .bak)            java.util.Properties text: endIndex, committedIndex
  currterm (+ .bak)              java.util.Properties text: currTerm, voteLeader (MemberState)
All integers big-endian. Magic 1 is the only entry magic; DLedger writes channel, chain CRC and body CRC as 0
(reserved) in this version.
"""
from construct import Int32sb, Int64sb, Struct

HEADER_SIZE = 44           # DLedgerEntry.HEADER_SIZE: the fixed fields before the body length
BODY_OFFSET = 48           # DLedgerEntry.BODY_OFFSET: the body starts here
POS_OFFSET = 24            # DLedgerEntry.POS_OFFSET
INDEX_UNIT_SIZE = 32       # DLedgerMmapFileStore.INDEX_UNIT_SIZE
MAGIC = 1                  # DLedgerMmapFileStore.MAGIC_1 == CURRENT_MAGIC
BLANK_MAGIC = -1           # MmapFileList.BLANK_MAGIC_CODE
MIN_BLANK_LEN = 8          # MmapFileList.MIN_BLANK_LEN: an entry is only appended if it leaves room for a blank
DEFAULT_INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024
CHECKPOINT_KEYS = ("endIndex", "committedIndex")
CURRTERM_KEYS = ("currTerm", "voteLeader")

EntryHeader = Struct(
    "magic" / Int32sb * "entry magic, 1 (MAGIC_1); -1 marks the blank at the end of a data file",
    "size" / Int32sb * "whole entry size: 48 + body length",
    "index" / Int64sb * "entry index, +1 per entry across files",
    "term" / Int64sb * "Raft term the entry was appended in, never decreasing",
    "pos" / Int64sb * "absolute position of this entry in the data log (file start + position)",
    "channel" / Int32sb * "reserved (0)",
    "chain_crc" / Int32sb * "reserved in 0.3.1.2 (written 0)",
    "body_crc" / Int32sb * "reserved in 0.3.1.2 (written 0)",
    "body_length" / Int32sb * "body length; size == body_length + 48",
)

BlankEntry = Struct(
    "magic" / Int32sb * "-1 (MmapFileList.BLANK_MAGIC_CODE)",
    "size" / Int32sb * "bytes from here to the end of the file",
)

IndexUnit = Struct(
    "magic" / Int32sb * "magic of the entry (1)",
    "pos" / Int64sb * "absolute position of the entry in the data log",
    "size" / Int32sb * "entry size (header + body)",
    "index" / Int64sb * "entry index (== unit number)",
    "term" / Int64sb * "entry term",
)
