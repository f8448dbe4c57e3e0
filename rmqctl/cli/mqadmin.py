"""mqadmin's verbs and short flags, as aliases of rmqctl commands (operators type what they know).

`rmqctl queryMsgByKey STORE -t T -k K` runs `rmqctl query STORE --topic T --key K`. The store given on
the line is the broker, so the flags that name a broker, cluster or name server (-b, -c, -n host:port)
are dropped with a note. One table here drives the translation, `rmqctl --help` and the README table.
"""
from __future__ import annotations

import re
import sys

# verb -> (rmqctl words, {mqadmin flag: rmqctl option}, {flags dropped with their value: what they name}),
# from the mqadmin sub-commands' own options (tools/.../command/message, offset, consumer, topic)
_CLUSTER = {"-c": "cluster", "--cluster": "cluster"}
_RESEND = {"-g": "consumer group (resend)", "-d": "client id (resend)", "-s": "resend switch", "-u": "unit name",
           "-f": "body format"}
VERBS = {
    "queryMsgByKey": (["query"], {"-t": "--topic", "-k": "--key", "--msgKey": "--key", "-b": "--begin",
                                  "--beginTimestamp": "--begin", "-e": "--end", "--endTimestamp": "--end",
                                  "-m": "--max", "--maxNum": "--max"}, _CLUSTER),
    "queryMsgById": (["query"], {"-i": "--msg-id", "--msgId": "--msg-id"}, {"-t": "topic", **_RESEND, **_CLUSTER}),
    "queryMsgByUniqueKey": (["query"], {"-i": "--uniq-key", "--msgId": "--uniq-key", "-t": "--topic"},
                            {**_RESEND, **_CLUSTER}),
    "queryMsgByOffset": (["query"], {"-t": "--topic", "-i": "--queue", "--queueId": "--queue", "-o": "--offset"},
                         {"-b": "broker name", "--brokerName": "broker name", "-f": "body format"}),
    "resetOffsetByTime": (["config", "offsets", "reset"], {"-g": "--group", "-t": "--topic", "-s": "--to-time",
                                                           "--timestamp": "--to-time"},
                          {"-f": "force switch", "-b": "broker address", **_CLUSTER}),
    "consumerProgress": (["config", "offsets", "show"], {"-g": "--group", "--groupName": "--group", "-t": "--topic",
                                                         "--topicName": "--topic"},
                         {"-s": "show client IP", **_CLUSTER}),
    "topicList": (["config", "topics", "list"], {}, _CLUSTER),
}
_VALUELESS = {"-a": "show all", "--showAll": "show all"}   # queryMsgByUniqueKey -a

_NAMESRV = re.compile(r"[\w.\-]+:\d+([;,][\w.\-]+:\d+)*")


def translate(args: list[str]) -> list[str]:
    """argv after `rmqctl` (and its global options): an mqadmin verb becomes its rmqctl command."""
    if not args or args[0] not in VERBS:
        return args
    words, flags, dropped = VERBS[args[0]]
    out, rest, i = list(words), args[1:], 0
    while i < len(rest):
        a = rest[i]
        if a == "--":
            out.extend(rest[i:])
            break
        nxt = rest[i + 1] if i + 1 < len(rest) else None
        if a in _VALUELESS:
            sys.stderr.write(f"rmqctl: note: {a} ignored ({_VALUELESS[a]})\n")
            i += 1
            continue
        if a in dropped and nxt is not None:
            sys.stderr.write(f"rmqctl: note: {a} {nxt} ignored ({dropped[a]}: offline, the store given is the "
                             f"broker)\n")
            i += 2
            continue
        if a == "-n" and nxt is not None and _NAMESRV.fullmatch(nxt):
            sys.stderr.write(f"rmqctl: note: -n {nxt} ignored (name server: offline, the store given is the "
                             f"broker)\n")
            i += 2
            continue
        out.append(flags.get(a, a))
        i += 1
    return out


def _usage(verb: str) -> str:
    words, flags, _ = VERBS[verb]
    short = [f"{k}={v}" for k, v in flags.items() if not k.startswith("--")]
    return f"rmqctl {' '.join(words)} STORE {' '.join(short)}".rstrip()


def help_table() -> str:
    """The mapping shown in `rmqctl --help` (click keeps \\b blocks as written)."""
    rows = [f"  {verb:<20} {_usage(verb)}" for verb in VERBS]
    return ("\b\nmqadmin names (aliases: `rmqctl queryMsgByKey STORE -t T -k K`; flags naming a cluster,\n"
            "name server or broker (-c, -n HOST:PORT, queryMsgByOffset -b) are ignored offline):\n" + "\n".join(rows) +
            "\n  updateTopic (no alias) rmqctl config topics create|update STORE TOPIC -r R -w W -p PERM")


def readme_table() -> str:
    lines = ["| mqadmin | rmqctl |", "|---|---|"]
    for verb in VERBS:
        words, flags, _ = VERBS[verb]
        opts = ", ".join(f"`{k}` → `{v}`" for k, v in flags.items() if not k.startswith("--"))
        lines.append(f"| `{verb}` | `rmqctl {' '.join(words)} STORE`" + (f" ({opts})" if opts else "") + " |")
    lines.append("| `updateTopic` | `rmqctl config topics create\\|update STORE TOPIC` |")
    return "\n".join(lines)
