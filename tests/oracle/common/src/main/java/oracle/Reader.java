package oracle;

import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.QueryMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.index.IndexFile;
import org.apache.rocketmq.store.index.IndexService;
import org.apache.rocketmq.store.index.QueryOffsetResult;

import java.io.File;
import java.lang.reflect.Field;
import java.net.Inet6Address;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/** `read`: the broker's view of a store (on a temporary copy). */
final class Reader {
    private Reader() {
    }

    static final int BLANK_MAGIC_CODE = -875286124;
    static final long EXT_MAX_ADDR = Integer.MIN_VALUE - 1L; // ConsumeQueueExt.MAX_ADDR
    static final String[] ABSENT_KEYS = {"no-such-key-1", "no-such-key-2", "\u4e0d\u5b58\u5728"};

    static Map<String, Object> read(Compat c, String storeDir, String confPath) throws Exception {
        File src = new File(storeDir);
        if (!new File(src, "commitlog").isDirectory() && !DLedger.isDLedgerStore(src)) {
            throw new IllegalArgumentException("not a store dir (no commitlog/): " + storeDir);
        }
        Map<String, Object> sc = StoreConf.forRead(storeDir, confPath);
        Set<String> originalIndexNames = new HashSet<>();
        File[] idx = new File(src, "index").listFiles();
        if (idx != null) {
            for (File f : idx) {
                originalIndexNames.add(f.getName());
            }
        }
        // 4.9's ConsumeQueue.getOffsetInQueueByTime picks the CQ file by file mtime (first file with mtime >= t).
        // Make that reproducible: all files of the copy (and all files recovery rewrites) get an mtime later than
        // every queried timestamp (<= newest store timestamp + 1000 ms), by waiting until 2.5 s after the newest
        // input file was modified.
        long newest = newestMtime(src);
        long wait = newest + 2500 - System.currentTimeMillis();
        if (wait > 0) {
            Thread.sleep(Math.min(wait, 5000));
        }
        Path tmp = Files.createTempDirectory("oracle-read");
        try {
            Path copy = tmp.resolve("store");
            Files2.copyRecursive(src.toPath(), copy);
            return readCopy(c, copy.toString(), sc, originalIndexNames, src, Filters.forRead(storeDir, confPath));
        } finally {
            Files2.deleteRecursive(tmp);
        }
    }

    static Map<String, Object> readCopy(Compat c, String dir, Map<String, Object> sc, Set<String> originalIndexNames,
        File src, Object sql92Filters) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("rocketmq_version", c.version());
        out.put("recovery", new File(dir, "abort").exists() ? "abnormal" : "normal");
        MessageStoreConfig cfg = StoreConf.build(sc, dir, false);
        org.apache.rocketmq.broker.filter.ConsumerFilterManager filters = Filters.create(sql92Filters, cfg);
        DefaultMessageStore store = c.newStore(cfg, Collections.emptyList());
        Hooks.call("oracle.BatchCq", "prepareRead", store, dir); // topics.json attributes (queue.type=BatchCQ)
        Filters.install(store, filters); // abnormal recovery re-dispatches: same bit maps as the writer
        boolean ok;
        try {
            ok = store.load();
        } catch (Throwable t) {
            out.put("load_error", t.toString());
            ok = false;
        }
        out.put("load_ok", ok);
        if (!ok) {
            return out;
        }
        store.start();
        long deadline = System.currentTimeMillis() + 60000;
        while (store.dispatchBehindBytes() > 0 && System.currentTimeMillis() < deadline) {
            Thread.sleep(5);
        }
        Thread.sleep(20);

        Map<String, Object> cl = new LinkedHashMap<>();
        cl.put("min_offset", store.getMinPhyOffset());
        cl.put("max_offset", store.getMaxPhyOffset());
        cl.put("confirm_offset", c.confirmOffset(store));
        cl.put("dispatch_behind_bytes", store.dispatchBehindBytes());
        out.put("commitlog", cl);

        // queues
        List<Object> queues = new ArrayList<>();
        Map<String, List<Integer>> qids = c.queueIds(store);
        for (Map.Entry<String, List<Integer>> e : qids.entrySet()) {
            for (int qid : e.getValue()) {
                Map<String, Object> q = new LinkedHashMap<>();
                q.put("topic", e.getKey());
                q.put("queue_id", qid);
                long min = store.getMinOffsetInQueue(e.getKey(), qid);
                long max = c.maxOffsetInQueue(store, e.getKey(), qid);
                if (phantom(store, c, src, e.getKey(), qid)) {
                    continue;
                }
                q.put("min_offset", min);
                q.put("max_offset", max);
                List<Object> units = new ArrayList<>();
                for (long[] u : c.units(store, e.getKey(), qid, min, max)) {
                    Map<String, Object> um = new LinkedHashMap<>();
                    um.put("queue_offset", u[0]);
                    um.put("physical_offset", u[1]);
                    um.put("size", u[2]);
                    um.put("tags_code", u[3]);
                    if (u[3] <= EXT_MAX_ADDR) {
                        // enableConsumeQueueExt: the ext unit the broker links this unit to (null: none)
                        um.put("ext", c.ext(store, e.getKey(), qid, u[3]));
                    }
                    units.add(um);
                }
                q.put("units", units);
                queues.add(q);
            }
        }
        out.put("queues", queues);

        // messages: walk the commitlog with the broker's decoder
        List<Object> messages = new ArrayList<>();
        List<MessageExt> decoded = new ArrayList<>();
        long off = store.getMinPhyOffset();
        long max = store.getMaxPhyOffset();
        String walkError = null;
        if (DLedger.isDLedgerStore(src)) {
            walkError = DLedger.walk(store, out, decoded, messages); // entries, not records, tile a DLedger log
            off = max;
        }
        while (off >= 0 && off < max) {
            SelectMappedBufferResult r = store.getCommitLogData(off);
            if (r == null) {
                off = store.getCommitLog().rollNextFile(off);
                continue;
            }
            try {
                ByteBuffer bb = r.getByteBuffer().slice();
                if (bb.remaining() < 8) {
                    off = store.getCommitLog().rollNextFile(off);
                    continue;
                }
                int size = bb.getInt(0);
                int magic = bb.getInt(4);
                if (magic == BLANK_MAGIC_CODE) {
                    off = store.getCommitLog().rollNextFile(off);
                    continue;
                }
                if (size <= 0 || size > bb.remaining()) {
                    walkError = "bad record size " + size + " at " + off;
                    break;
                }
                ByteBuffer one = bb.slice();
                one.limit(size);
                MessageExt m = MessageDecoder.decode(one, true, false);
                if (m == null) {
                    walkError = "decode failed at " + off;
                    break;
                }
                decoded.add(m);
                messages.add(msgJson(m));
                off += size;
            } finally {
                r.release();
            }
        }
        if (walkError != null) {
            out.put("walk_error", walkError);
        }
        out.put("messages", messages);

        // key queries
        IndexService is = (IndexService) field(store, "indexService");
        LinkedHashSet<List<String>> keys = new LinkedHashSet<>();
        String firstTopic = null;
        for (MessageExt m : decoded) {
            if (firstTopic == null) {
                firstTopic = m.getTopic();
            }
            String uk = m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
            if (uk != null) {
                keys.add(List.of(m.getTopic(), uk));
            }
            String ks = m.getKeys();
            if (ks != null) {
                for (String k : ks.split(MessageConst.KEY_SEPARATOR)) {
                    if (!k.isEmpty()) {
                        keys.add(List.of(m.getTopic(), k));
                    }
                }
            }
        }
        if (firstTopic != null) {
            for (String k : ABSENT_KEYS) {
                keys.add(List.of(firstTopic, k));
            }
        }
        List<Object> kq = new ArrayList<>();
        for (List<String> tk : keys) {
            kq.add(keyQuery(store, is, tk.get(0), tk.get(1), 0, Long.MAX_VALUE));
        }
        // a few narrower windows: [storeTs, storeTs] and [storeTs + 1, MAX] of some keyed messages
        int narrow = 0;
        for (MessageExt m : decoded) {
            if (narrow >= 3) {
                break;
            }
            String ks = m.getKeys();
            if (ks == null || ks.isEmpty()) {
                continue;
            }
            String k = ks.split(MessageConst.KEY_SEPARATOR)[0];
            if (k.isEmpty()) {
                continue;
            }
            kq.add(keyQuery(store, is, m.getTopic(), k, m.getStoreTimestamp(), m.getStoreTimestamp()));
            kq.add(keyQuery(store, is, m.getTopic(), k, m.getStoreTimestamp() + 1, Long.MAX_VALUE));
            narrow++;
        }
        out.put("key_queries", kq);

        // time queries
        List<Object> tq = new ArrayList<>();
        for (Map.Entry<String, List<Integer>> e : qids.entrySet()) {
            for (int qid : e.getValue()) {
                if (phantom(store, c, src, e.getKey(), qid)) {
                    continue;
                }
                TreeSet<Long> ts = new TreeSet<>();
                ts.add(0L);
                long maxTs = 0;
                for (MessageExt m : decoded) {
                    if (m.getTopic().equals(e.getKey()) && m.getQueueId() == qid) {
                        long t = m.getStoreTimestamp();
                        ts.add(t);
                        ts.add(t - 1);
                        ts.add(t + 1);
                        maxTs = Math.max(maxTs, t);
                    }
                }
                ts.add(maxTs + 1000);
                List<Object> res = new ArrayList<>();
                for (long t : ts) {
                    res.add(new long[] {t, store.getOffsetInQueueByTime(e.getKey(), qid, t)});
                }
                Map<String, Object> q = new LinkedHashMap<>();
                q.put("topic", e.getKey());
                q.put("queue_id", qid);
                q.put("results", res);
                tq.add(q);
            }
        }
        out.put("time_queries", tq);

        // index files kept / created by the broker
        List<Object> files = new ArrayList<>();
        @SuppressWarnings("unchecked")
        List<IndexFile> list = new ArrayList<>((List<IndexFile>) field(is, "indexFileList"));
        int created = 0;
        for (IndexFile f : list) {
            String name = new File(f.getFileName()).getName();
            Map<String, Object> fm = new LinkedHashMap<>();
            boolean isNew = !originalIndexNames.contains(name);
            fm.put("name", isNew ? "<created-during-read-" + (created++) + ">" : name);
            fm.put("created_during_read", isNew);
            ByteBuffer h = ByteBuffer.wrap(StoreConf.readHead(new File(f.getFileName()), 40));
            fm.put("begin_timestamp", h.getLong(0));
            fm.put("end_timestamp", h.getLong(8));
            fm.put("begin_phy_offset", h.getLong(16));
            fm.put("end_phy_offset", h.getLong(24));
            fm.put("hash_slot_count", h.getInt(32));
            fm.put("index_count", h.getInt(36));
            files.add(fm);
        }
        out.put("index_files", files);
        Hooks.call("oracle.BatchCq", "view", store, out); // "batch_queues" (5.x)
        return out;
    }

    static long newestMtime(File f) {
        if (f.isFile()) {
            return f.lastModified();
        }
        long m = 0;
        File[] fs = f.listFiles();
        if (fs != null) {
            for (File x : fs) {
                m = Math.max(m, newestMtime(x));
            }
        }
        return m;
    }

    /** An empty in-memory queue the broker created on its own (e.g. 4.9's 18 SCHEDULE_TOPIC_XXXX queues). */
    static boolean phantom(DefaultMessageStore store, Compat c, File src, String topic, int qid) throws Exception {
        return store.getMinOffsetInQueue(topic, qid) == 0 && c.maxOffsetInQueue(store, topic, qid) == 0
            && !new File(src, "consumequeue/" + topic + "/" + qid).exists();
    }

    static Map<String, Object> keyQuery(DefaultMessageStore store, IndexService is, String topic, String key,
        long begin, long end) {
        Map<String, Object> q = new LinkedHashMap<>();
        q.put("topic", topic);
        q.put("key", key);
        q.put("begin", begin);
        q.put("end", end);
        q.put("max_num", 64);
        QueryOffsetResult qr = is.queryOffset(topic, key, 64, begin, end);
        q.put("phys_offsets", new ArrayList<>(qr.getPhyOffsets()));
        List<Long> mo = new ArrayList<>();
        QueryMessageResult r = store.queryMessage(topic, key, 64, begin, end);
        if (r != null) {
            try {
                for (ByteBuffer b : r.getMessageBufferList()) {
                    mo.add(b.getLong(b.position() + 28));
                }
            } finally {
                r.release();
            }
        }
        q.put("messages_phys_offsets", mo);
        return q;
    }

    static Object field(Object o, String name) throws Exception {
        Class<?> k = o.getClass();
        while (k != null) {
            try {
                Field f = k.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(o);
            } catch (NoSuchFieldException e) {
                k = k.getSuperclass();
            }
        }
        throw new NoSuchFieldException(name);
    }

    static String hostString(java.net.SocketAddress sa) {
        InetSocketAddress a = (InetSocketAddress) sa;
        if (a.getAddress() instanceof Inet6Address) {
            return "[" + ipv6(a.getAddress().getAddress()) + "]:" + a.getPort();
        }
        return a.getAddress().getHostAddress() + ":" + a.getPort();
    }

    /** RFC 5952 text (what Python's ipaddress prints): longest run (>= 2) of zero groups becomes "::". */
    static String ipv6(byte[] b) {
        int[] g = new int[8];
        for (int i = 0; i < 8; i++) {
            g[i] = ((b[2 * i] & 0xff) << 8) | (b[2 * i + 1] & 0xff);
        }
        int bestStart = -1;
        int bestLen = 0;
        for (int i = 0; i < 8; ) {
            if (g[i] == 0) {
                int j = i;
                while (j < 8 && g[j] == 0) {
                    j++;
                }
                if (j - i > bestLen) {
                    bestLen = j - i;
                    bestStart = i;
                }
                i = j;
            } else {
                i++;
            }
        }
        if (bestLen < 2) {
            bestStart = -1;
        }
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < 8; i++) {
            if (i == bestStart) {
                sb.append("::");
                i += bestLen - 1;
                continue;
            }
            if (sb.length() > 0 && sb.charAt(sb.length() - 1) != ':') {
                sb.append(':');
            }
            sb.append(Integer.toHexString(g[i]));
        }
        return sb.toString();
    }

    static Map<String, Object> msgJson(MessageExt m) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("topic", m.getTopic());
        r.put("queue_id", m.getQueueId());
        r.put("queue_offset", m.getQueueOffset());
        r.put("physical_offset", m.getCommitLogOffset());
        r.put("size", m.getStoreSize());
        r.put("sys_flag", m.getSysFlag());
        r.put("flag", m.getFlag());
        r.put("body_crc", m.getBodyCRC());
        r.put("born_timestamp", m.getBornTimestamp());
        r.put("born_host", hostString(m.getBornHost()));
        r.put("store_timestamp", m.getStoreTimestamp());
        r.put("store_host", hostString(m.getStoreHost()));
        r.put("reconsume_times", m.getReconsumeTimes());
        r.put("prepared_transaction_offset", m.getPreparedTransactionOffset());
        byte[] body = m.getBody();
        r.put("body_b64", Base64.getEncoder().encodeToString(body == null ? new byte[0] : body));
        r.put("properties", new TreeMap<>(m.getProperties()));
        r.put("msg_id", m.getMsgId());
        r.put("transaction_type", (m.getSysFlag() & MessageSysFlag.TRANSACTION_ROLLBACK_TYPE) >> 2);
        return r;
    }
}
