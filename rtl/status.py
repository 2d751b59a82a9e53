"""Error codes the core reports in its status (``error`` output / ``docs/architecture.md``)."""

from amaranth.lib import enum


class ErrorCode(enum.Enum, shape=4):
    NONE = 0
    ILLEGAL = 1      #: an instruction word does not decode (the decoder's reason is not kept)
    FETCH = 2        #: the AXI read of an instruction that is executed answered an error
    LOAD_BUS = 3     #: an ld's AXI read answered SLVERR / DECERR
    STORE_BUS = 4    #: an st's AXI write answered SLVERR / DECERR
    RANGE = 5        #: an on-chip buffer address (or lane) outside the buffer
    ALIGN = 6        #: a misaligned access (group-pruned load, lane-aligned acc / obuf word)
    INDEX = 7        #: a malformed connection index (a stride position beyond its row)
    FORMAT = 8       #: an fc needing the lanes to convert a weight index (stride off the merge)
