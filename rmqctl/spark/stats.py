"""`rmqctl stats`: per store/topic/queue figures from the messages DataFrame, in ONE scan.

The scan feeds one aggregation at (store, topic, queue, minute) grain -- counts, bytes, times, a
power-of-two size histogram and HyperLogLog sketches of KEYS and UNIQ_KEY -- which is persisted and
rolled up to queues, topics and the rate series (sketches merge, so key cardinality rolls up too).
Counts, bytes, times and offsets are exact; distinct key counts are HLL estimates (~1.6% at lgK 12).
"""
from __future__ import annotations

from rmqctl import fastjson

HIST_LO, HIST_HI = 6, 27          # buckets [2^b, 2^(b+1)) for b in 6..27 (records are >= 91 bytes)
MINUTE = 60_000
MAX_POINTS = 600                  # per topic in the rate series: bucket width grows with the time span


def hist_label(b: int) -> str:
    def h(n):
        for unit in ("B", "KiB", "MiB"):
            if n < 1024:
                return f"{n}{unit}"
            n //= 1024
        return f"{n}GiB"
    return f"{h(1 << b)}-{h(1 << (b + 1))}"


def compute(ds, flt=None) -> dict:
    """Run the stats job over a Dataset; returns the JSON-ready result."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    def action(ds):
        m = ds.messages(flt)
        dispatched = F.col("transaction_type").isin("NOT", "COMMIT")
        inner = F.coalesce(F.col("properties").getItem("INNER_NUM").cast("long"), F.lit(1))
        m = m.select("store", "topic", "queue_id", "size", "store_timestamp", "uniq_key",
                     F.floor(F.col("store_timestamp") / MINUTE).cast("long").alias("minute"),
                     F.when(dispatched, F.col("queue_offset") + inner).alias("next_off"),
                     F.least(F.greatest(F.floor(F.log2("size")).cast("int"), F.lit(HIST_LO)),
                             F.lit(HIST_HI)).alias("bucket"),
                     F.posexplode_outer("keys").alias("kpos", "key"))
        first = F.col("kpos").isNull() | (F.col("kpos") == 0)   # one row per message counts
        one = F.when(first, 1).otherwise(0)
        aggs = [F.sum(one).alias("messages"), F.sum(F.when(first, F.col("size"))).alias("bytes"),
                F.min("store_timestamp").alias("first_ts"), F.max("store_timestamp").alias("last_ts"),
                F.min("size").alias("min_size"), F.max("size").alias("max_size"),
                F.max("next_off").alias("next_off"),
                F.hll_sketch_agg("key", 12).alias("keys_hll"),
                F.hll_sketch_agg(F.when(first, F.col("uniq_key")), 12).alias("uniq_hll")]
        aggs += [F.sum(F.when(first & (F.col("bucket") == b), 1).otherwise(0)).alias(f"h{b}")
                 for b in range(HIST_LO, HIST_HI + 1)]
        g = m.groupBy("store", "topic", "queue_id", "minute").agg(*aggs).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            hist = [F.sum(f"h{b}").alias(f"h{b}") for b in range(HIST_LO, HIST_HI + 1)]
            common = [F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"),
                      F.min("first_ts").alias("first_ts"), F.max("last_ts").alias("last_ts"),
                      F.min("min_size").alias("min_size"), F.max("max_size").alias("max_size"),
                      F.hll_sketch_estimate(F.hll_union_agg("keys_hll", True)).alias("distinct_keys"),
                      F.hll_sketch_estimate(F.hll_union_agg("uniq_hll", True)).alias("distinct_uniq_keys")]
            queues = g.groupBy("store", "topic", "queue_id").agg(
                *common, F.max("next_off").alias("next_off"), F.max("messages").alias("peak_per_minute"),
                *hist).collect()
            topics = g.groupBy("store", "topic").agg(*common, F.countDistinct("queue_id").alias("queues"),
                                                    *hist).collect()
            lo = min((r.first_ts for r in queues), default=0)
            hi = max((r.last_ts for r in queues), default=0)
            span_min = max(1, (hi - lo) // MINUTE + 1)
            width = max(1, -(-span_min // MAX_POINTS))       # minutes per point
            series = (g.groupBy("topic", (F.floor(F.col("minute") / width) * width).alias("t"))
                      .agg(F.sum("messages").alias("n")).collect())
        finally:
            g.unpersist()
        return queues, topics, series, width

    queues, topics, series, width = ds.run(action)

    def hist_of(r):
        return {hist_label(b): getattr(r, f"h{b}") for b in range(HIST_LO, HIST_HI + 1) if getattr(r, f"h{b}")}

    def base(r):
        n = r.messages or 0
        return {"messages": n, "bytes": r.bytes or 0, "first_store_timestamp": r.first_ts,
                "last_store_timestamp": r.last_ts, "min_size": r.min_size, "max_size": r.max_size,
                "avg_size": round((r.bytes or 0) / n, 1) if n else None,
                "distinct_keys": int(r.distinct_keys or 0), "distinct_uniq_keys": int(r.distinct_uniq_keys or 0),
                "size_histogram": hist_of(r)}

    qrows = sorted(({"store": r.store, "topic": r.topic, "queue_id": r.queue_id, **base(r),
                     "max_offset": r.next_off, "peak_per_minute": r.peak_per_minute} for r in queues),
                   key=lambda d: (d["store"], d["topic"], d["queue_id"]))
    trows = sorted(({"store": r.store, "topic": r.topic, "queues": r.queues, **base(r)} for r in topics),
                   key=lambda d: (d["store"], -d["messages"], d["topic"]))
    rate: dict[str, list] = {}
    for r in sorted(series, key=lambda r: (r.topic, r.t)):
        rate.setdefault(r.topic, []).append([r.t * MINUTE, r.n])
    max_off = {(q["store"], q["topic"], q["queue_id"]): q["max_offset"] for q in qrows}
    lag = []
    for info in ds.stores:
        lag.extend(consumer_lag(info.ref.name, info.consumer_offsets, max_off,
                                path=(info.ref.local or info.ref.uri) + "/config/consumerOffset.json"))
    totals = {"messages": sum(t["messages"] for t in trows), "bytes": sum(t["bytes"] for t in trows),
              "topics": len({t["topic"] for t in trows}), "queues": len(qrows)}
    return {"stores": [i.ref.name for i in ds.stores], "totals": totals, "topics": trows, "queues": qrows,
            "rate": {"bucket_ms": width * MINUTE, "unit": "messages per minute", "per_minute_divisor": width,
                     "series": rate},
            "consumer_lag": lag,
            "scan": {"bytes": ds.total_bytes, "splits": len(ds.plan.splits), "runs": ds.runs,
                     "stops": ds.last_summary}}


def consumer_lag(store: str, raw: bytes | None, max_off: dict, path: str = "consumerOffset.json") -> list[dict]:
    """Per group/topic/queue: committed offset (config/consumerOffset.json) vs the queue's max offset
    (next queue offset after the last dispatched message in the commitlog)."""
    if not raw:
        return []
    doc = fastjson.loads(raw, path=path)
    table = doc.get("offsetTable") if isinstance(doc, dict) else None
    out = []
    for key, qmap in (table or {}).items():
        topic, sep, group = str(key).rpartition("@")
        if not sep or not isinstance(qmap, dict):
            continue
        for qid, off in qmap.items():
            try:
                qid = int(qid)
            except (TypeError, ValueError):
                continue
            mx = max_off.get((store, topic, qid))
            out.append({"store": store, "group": group, "topic": topic, "queue_id": qid,
                        "consumer_offset": off, "max_offset": mx,
                        "lag": None if mx is None or not isinstance(off, int) else max(0, mx - off)})
    out.sort(key=lambda d: (d["group"], d["topic"], d["queue_id"]))
    return out


# --- the picture: messages per minute per topic, self-contained (inline SVG, no network) ---------

_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]


def _esc(s: str) -> str:
    return (str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;"))


def chart_svg(result: dict, width: int = 960, height: int = 420, top: int = 9) -> str:
    """Line chart of messages per minute per topic (the `top` busiest topics, the rest as 'other')."""
    import datetime as dt

    rate = result["rate"]
    div = rate.get("per_minute_divisor", 1)
    series = rate["series"]
    order = sorted(series, key=lambda t: -sum(n for _, n in series[t]))
    shown, rest = order[:top], order[top:]
    lines = {t: {ts: n / div for ts, n in series[t]} for t in shown}
    if rest:
        other: dict = {}
        for t in rest:
            for ts, n in series[t]:
                other[ts] = other.get(ts, 0) + n / div
        lines["other"] = other
    xs = sorted({ts for pts in lines.values() for ts in pts})
    ml, mr, mt, mb = 70, 180, 30, 50
    pw, ph = width - ml - mr, height - mt - mb
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<text x="{ml}" y="18" font-size="14">Messages per minute per topic '
           f'({_esc(", ".join(result.get("stores", [])))})</text>']
    if not xs:
        out.append(f'<text x="{ml}" y="{mt + ph / 2}">no messages</text></svg>')
        return "\n".join(out)
    x0, x1 = xs[0], max(xs[-1], xs[0] + 1)
    ymax = max(max(p.values()) for p in lines.values()) or 1

    def X(ts):
        return ml + (ts - x0) / (x1 - x0) * pw

    def Y(v):
        return mt + ph - v / ymax * ph

    out.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    for i in range(5):
        v = ymax * i / 4
        out.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#eee"/>'
                   f'<text x="{ml - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:,.1f}</text>')
    for i in range(5):
        ts = x0 + (x1 - x0) * i / 4
        label = dt.datetime.fromtimestamp(ts / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
        out.append(f'<text x="{X(ts):.1f}" y="{mt + ph + 18}" text-anchor="middle">{label}</text>')
    out.append(f'<text x="{ml + pw / 2}" y="{height - 8}" text-anchor="middle">store time (UTC), '
               f'{rate["bucket_ms"] // 60000} min per point</text>')
    for i, (topic, pts) in enumerate(lines.items()):
        c = _COLORS[i % len(_COLORS)]
        path = " ".join(f"{X(ts):.1f},{Y(pts.get(ts, 0)):.1f}" for ts in xs)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{path}">'
                   f'<title>{_esc(topic)}</title></polyline>')
        out.append(f'<rect x="{ml + pw + 12}" y="{mt + i * 18}" width="10" height="10" fill="{c}"/>'
                   f'<text x="{ml + pw + 26}" y="{mt + i * 18 + 9}">{_esc(topic[:24])}</text>')
    out.append("</svg>")
    return "\n".join(out)


def chart_html(result: dict) -> str:
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rmqctl stats</title></head>\n"
            "<body style=\"font-family:sans-serif\">\n" + chart_svg(result) + "\n</body></html>\n")
