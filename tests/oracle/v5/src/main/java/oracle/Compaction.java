package oracle;

import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.body.TopicConfigSerializeWrapper;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.GetMessageStatus;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.kv.CompactionStore;
import org.apache.rocketmq.store.queue.CqUnit;
import org.apache.rocketmq.store.queue.ReferredIterator;
import org.apache.rocketmq.store.queue.SparseConsumeQueue;

import java.io.File;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;

/**
 * Compaction topics (5.x only): `compaction-write` writes a store whose topics listed in the scenario's
 * "compaction": {"topics": [...]} carry the attribute cleanup.policy=COMPACTION (config/topics.json written by the
 * broker's TopicConfigManager); the broker's CommitLogDispatcherCompaction fills compaction/compactionLog and
 * compactionCq, then (per "compact": "end" | "snapshot" | "never") the broker's own CompactionLog.doCompaction() runs
 * once on every compaction queue. "end": "crash" leaves the store as a killed broker would, with consumequeue/,
 * index/, checkpoint and compaction/ as they were after crash_after puts. `compaction-read` prints what the
 * compaction store serves after the broker's load (on a copy); `compaction-restart` is load/start/shutdown in place.
 */
final class Compaction {
    private Compaction() {
    }

    static final String[] SNAPSHOT_ITEMS = {"consumequeue", "index", "checkpoint", "compaction"};

    @SuppressWarnings("unchecked")
    static Map<String, Object> write(Compat c, String scenarioPath, String storeDir) throws Exception {
        Map<String, Object> sc = Writer.loadScenario(scenarioPath);
        Map<String, Object> comp = (Map<String, Object>) sc.getOrDefault("compaction", new LinkedHashMap<>());
        List<Object> ctopics = (List<Object>) comp.getOrDefault("topics", new ArrayList<>());
        String compactAt = String.valueOf(comp.getOrDefault("compact", "end"));
        boolean crash = "crash".equals(String.valueOf(sc.getOrDefault("end", "shutdown")));
        int crashAfter = crash ? ((Number) sc.get("crash_after")).intValue() : -1;

        File dest = new File(storeDir);
        if (dest.exists() && dest.list() != null && dest.list().length > 0) {
            throw new IllegalStateException("store dir is not empty: " + storeDir);
        }
        Path work = crash ? Files.createTempDirectory("oracle-compaction").resolve("store") : dest.toPath();
        Path snap = crash ? Files.createTempDirectory("oracle-compaction-snap") : null;
        Map<String, Object> storeConfig = (Map<String, Object>) sc.getOrDefault("store_config", new LinkedHashMap<>());
        Map<String, Object> defaults = (Map<String, Object>) sc.getOrDefault("defaults", new LinkedHashMap<>());
        List<Map<String, Object>> msgs = Writer.expand((List<Object>) sc.get("messages"));
        MessageStoreConfig cfg = StoreConf.build(storeConfig, work.toString());

        LinkedHashSet<String> topics = new LinkedHashSet<>();
        for (Map<String, Object> m : msgs) {
            topics.add(String.valueOf(m.get("topic")));
        }
        ConcurrentMap<String, TopicConfig> table = new ConcurrentHashMap<>();
        for (String t : topics) {
            TopicConfig tc = new TopicConfig(t, 8, 8);
            if (ctopics.contains(t)) {
                Map<String, String> attrs = new HashMap<>();
                attrs.put("cleanup.policy", "COMPACTION");
                tc.setAttributes(attrs);
            }
            table.put(t, tc);
        }
        persistTopics(cfg, table);
        DefaultMessageStore store = newStore(cfg, table);
        if (!store.load()) {
            throw new IllegalStateException("load() of the new store failed");
        }
        store.start();

        Map<String, Object> out = new LinkedHashMap<>();
        out.put("rocketmq_version", c.version());
        out.put("store_config", StoreConf.normalized(storeConfig));
        List<Object> puts = new ArrayList<>();
        List<Object> compactions = new ArrayList<>();
        Map<String, Long> labels = new LinkedHashMap<>();
        long bornBase = ((Number) defaults.getOrDefault("born_timestamp_start", 1700000000000L)).longValue();
        long bornStep = ((Number) defaults.getOrDefault("born_timestamp_step", 1000L)).longValue();
        long interval = ((Number) sc.getOrDefault("put_interval_ms", 2)).longValue();
        long seed = ((Number) sc.getOrDefault("seed", 42)).longValue();
        Map<String, Object> crashInfo = null;
        for (int i = 0; i <= msgs.size(); i++) {
            if (i == crashAfter) {
                Writer.waitDispatch(store, 10000);
                if (compactAt.equals("snapshot")) {
                    compactions.add(compactAll(store));
                }
                store.getStoreCheckpoint().flush();
                compactionStore(store).flush(0);
                for (String item : SNAPSHOT_ITEMS) {
                    if (Files.exists(work.resolve(item))) {
                        Files2.copyRecursive(work.resolve(item), snap.resolve(item));
                    }
                }
                crashInfo = new LinkedHashMap<>();
                crashInfo.put("snapshot_after_puts", i);
                crashInfo.put("dispatched_up_to_phy_offset", store.getMaxPhyOffset());
            }
            if (i == msgs.size()) {
                break;
            }
            Map<String, Object> m = new LinkedHashMap<>(defaults);
            m.putAll(msgs.get(i));
            long born = m.containsKey("born_timestamp") ? ((Number) m.get("born_timestamp")).longValue()
                : bornBase + bornStep * i;
            MessageExt inner = c.newInner();
            Writer.fill(inner, m, born, seed + i, labels);
            PutMessageResult pr = c.put(store, inner, cfg);
            Map<String, Object> pi = new LinkedHashMap<>();
            pi.put("index", i);
            pi.put("uniq_key", inner.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            pi.put("topic", String.valueOf(m.get("topic")));
            pi.put("status", pr.getPutMessageStatus().toString());
            if (pr.getAppendMessageResult() != null) {
                pi.put("wrote_offset", pr.getAppendMessageResult().getWroteOffset());
                pi.put("wrote_bytes", pr.getAppendMessageResult().getWroteBytes());
                pi.put("logics_offset", pr.getAppendMessageResult().getLogicsOffset());
            }
            puts.add(pi);
            if (!pr.isOk()) {
                throw new IllegalStateException("put " + i + " failed: " + pr);
            }
            if (!crash || i < crashAfter) {
                Writer.waitDispatch(store, 10000);
            }
            if (interval > 0) {
                Thread.sleep(interval);
            }
        }
        out.put("puts", puts);
        out.put("max_phy_offset", store.getMaxPhyOffset());
        if (crash) {
            // a killed broker: everything written to the mapped files is on disk; the queues, index, checkpoint and
            // compaction files are those of the snapshot. The live store keeps running until this JVM halts.
            Writer.waitDispatch(store, 10000);
            store.getCommitLog().flush();
            Files2.copyRecursive(work, dest.toPath());
            for (String item : SNAPSHOT_ITEMS) {
                Files2.deleteRecursive(dest.toPath().resolve(item));
                if (Files.exists(snap.resolve(item))) {
                    Files2.copyRecursive(snap.resolve(item), dest.toPath().resolve(item));
                }
            }
            crashInfo.put("restored_from_snapshot", java.util.Arrays.asList(SNAPSHOT_ITEMS));
            crashInfo.put("abort_present", Files.exists(dest.toPath().resolve("abort")));
            out.put("end", "crash");
            out.put("crash", crashInfo);
        } else {
            Writer.waitDispatch(store, 10000);
            if (compactAt.equals("end")) {
                compactions.add(compactAll(store));
            }
            store.shutdown();
            out.put("end", "shutdown");
            out.put("abort_present", new File(storeDir, "abort").exists());
        }
        out.put("compactions", compactions);
        return out;
    }

    static void persistTopics(MessageStoreConfig cfg, Map<String, TopicConfig> table) throws Exception {
        MessageStoreConfig msc = new MessageStoreConfig();
        msc.setHaListenPort(0);
        msc.setStorePathRootDir(cfg.getStorePathRootDir());
        msc.setStorePathCommitLog(cfg.getStorePathCommitLog());
        NettyServerConfig nsc = new NettyServerConfig();
        nsc.setListenPort(0);
        BrokerController ctl = new BrokerController(new BrokerConfig(), nsc, new NettyClientConfig(), msc);
        for (TopicConfig tc : new TreeMap<>(table).values()) {
            // as mqadmin updateTopic sends it: "+name" adds an attribute (stored without the "+")
            TopicConfig req = new TopicConfig(tc);
            Map<String, String> attrs = new HashMap<>();
            if (tc.getAttributes() != null) {
                tc.getAttributes().forEach((k, v) -> attrs.put("+" + k, v));
            }
            req.setAttributes(attrs);
            ctl.getTopicConfigManager().updateTopicConfig(req);
        }
        ctl.getTopicConfigManager().persist();
    }

    static DefaultMessageStore newStore(MessageStoreConfig cfg, ConcurrentMap<String, TopicConfig> table)
        throws Exception {
        BrokerConfig bc = new BrokerConfig();
        bc.setLongPollingEnable(false);
        return new DefaultMessageStore(cfg, null, (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap,
            properties) -> { }, bc, table);
    }

    /** The topics of config/topics.json (the broker's own decoding), or an empty table. */
    static ConcurrentMap<String, TopicConfig> loadTopics(String storeDir) throws Exception {
        Path p = Paths.get(storeDir, "config", "topics.json");
        ConcurrentMap<String, TopicConfig> table = new ConcurrentHashMap<>();
        if (Files.exists(p)) {
            String s = new String(Files.readAllBytes(p), StandardCharsets.UTF_8);
            TopicConfigSerializeWrapper w = TopicConfigSerializeWrapper.fromJson(s, TopicConfigSerializeWrapper.class);
            if (w != null && w.getTopicConfigTable() != null) {
                table.putAll(w.getTopicConfigTable());
            }
        }
        return table;
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

    static CompactionStore compactionStore(DefaultMessageStore store) throws Exception {
        return (CompactionStore) field(store, "compactionStore");
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> logs(DefaultMessageStore store) throws Exception {
        return new TreeMap<>((Map<String, Object>) field(compactionStore(store), "compactionLogTable"));
    }

    /** One run of the broker's CompactionLog.doCompaction() on every compaction queue. */
    static Map<String, Object> compactAll(DefaultMessageStore store) throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        for (Map.Entry<String, Object> e : logs(store).entrySet()) {
            Method m = e.getValue().getClass().getDeclaredMethod("doCompaction");
            m.setAccessible(true);
            m.invoke(e.getValue());
            r.put(e.getKey(), positions(store).get(e.getKey()));
        }
        return r;
    }

    static Map<String, Object> positions(DefaultMessageStore store) throws Exception {
        return new TreeMap<>(compactionStore(store).getPositionMgr().getQueueOffsetMap());
    }

    static List<String> files(Path root, String sub) throws Exception {
        List<String> r = new ArrayList<>();
        Path base = root.resolve("compaction").resolve(sub);
        if (!Files.exists(base)) {
            return r;
        }
        try (java.util.stream.Stream<Path> s = Files.walk(base)) {
            s.filter(Files::isRegularFile).forEach(p -> r.add(root.relativize(p).toString() + ":" + p.toFile().length()));
        }
        java.util.Collections.sort(r);
        return r;
    }

    static Map<String, Object> read(Compat c, String storeDir, String confPath) throws Exception {
        Map<String, Object> sc = StoreConf.forRead(storeDir, confPath);
        Path tmp = Files.createTempDirectory("oracle-compaction-read");
        try {
            Path copy = tmp.resolve("store");
            Files2.copyRecursive(Paths.get(storeDir), copy);
            return view(c, copy, sc, false);
        } finally {
            Files2.deleteRecursive(tmp);
        }
    }

    static Map<String, Object> restart(Compat c, String storeDir, String confPath) throws Exception {
        Map<String, Object> sc = StoreConf.forRead(storeDir, confPath);
        return view(c, Paths.get(storeDir), sc, true);
    }

    static Map<String, Object> view(Compat c, Path root, Map<String, Object> sc, boolean shutdown) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("rocketmq_version", c.version());
        out.put("recovery", Files.exists(root.resolve("abort")) ? "abnormal" : "normal");
        out.put("files_before", filesMap(root));
        MessageStoreConfig cfg = StoreConf.build(sc, root.toString(), false);
        ConcurrentMap<String, TopicConfig> table = loadTopics(root.toString());
        TreeSet<String> ctopics = new TreeSet<>();
        for (TopicConfig tc : table.values()) {
            if (tc.getAttributes() != null && "COMPACTION".equals(tc.getAttributes().get("cleanup.policy"))) {
                ctopics.add(tc.getTopicName());
            }
        }
        out.put("compaction_topics", new ArrayList<>(ctopics));
        DefaultMessageStore store = newStore(cfg, table);
        boolean ok = store.load();
        out.put("load_ok", ok);
        if (!ok) {
            out.put("files_after_load", filesMap(root));
            return out;
        }
        out.put("files_after_load", filesMap(root));
        store.start();
        Writer.waitDispatch(store, 60000);
        Thread.sleep(50);
        out.put("positions", positions(store));
        List<Object> queues = new ArrayList<>();
        for (Map.Entry<String, Object> e : logs(store).entrySet()) {
            queues.add(queueView(store, e.getKey(), e.getValue(), ctopics));
        }
        out.put("queues", queues);
        if (shutdown) {
            store.shutdown();
            out.put("files_after_shutdown", filesMap(root));
        } else {
            out.put("files_after_start", filesMap(root));
        }
        return out;
    }

    static Map<String, Object> filesMap(Path root) throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("log", files(root, CompactionStore.COMPACTION_LOG_DIR));
        r.put("cq", files(root, CompactionStore.COMPACTION_CQ_DIR));
        return r;
    }

    static Map<String, Object> queueView(DefaultMessageStore store, String key, Object clog, TreeSet<String> ctopics)
        throws Exception {
        Map<String, Object> q = new LinkedHashMap<>();
        String topic = (String) field(clog, "topic");
        int qid = (Integer) field(clog, "queueId");
        q.put("topic", topic);
        q.put("queue_id", qid);
        Method getCQ = clog.getClass().getDeclaredMethod("getCQ");
        getCQ.setAccessible(true);
        SparseConsumeQueue cq = (SparseConsumeQueue) getCQ.invoke(clog);
        long min = cq.getMinOffsetInQueue();
        long max = cq.getMaxOffsetInQueue();
        q.put("min_offset", min);
        q.put("max_offset", max);
        q.put("max_phy_offset_in_log", cq.getMaxPhyOffsetInLog());
        List<Object> units = new ArrayList<>();
        long next = Math.max(min, 0);
        int guard = 0;
        while (next < max && guard++ < 100000) {
            ReferredIterator<CqUnit> it = cq.iterateFromOrNext(next);
            if (it == null) {
                break;
            }
            long before = next;
            try {
                while (it.hasNext()) {
                    CqUnit u = it.next();
                    if (u.getPos() < 0 || u.getSize() <= 0 || u.getBatchNum() <= 0) {
                        break;
                    }
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("queue_offset", u.getQueueOffset());
                    m.put("pos", u.getPos());
                    m.put("size", u.getSize());
                    m.put("tags_code", u.getTagsCode());
                    m.put("batch_num", (int) u.getBatchNum());
                    units.add(m);
                    next = u.getQueueOffset() + u.getBatchNum();
                }
            } finally {
                it.release();
            }
            if (next == before) {
                next = cq.rollNextFile(next);
                if (next <= before) {
                    break;
                }
            }
        }
        q.put("units", units);
        // what a consumer pulling the queue gets (DefaultMessageStore.getMessage -> CompactionStore.getMessage)
        if (!ctopics.contains(topic)) {
            // the topic is no longer COMPACTION: getMessage serves it from its consume queue, not from here
            q.put("messages", null);
            q.put("key", key);
            return q;
        }
        List<Object> msgs = new ArrayList<>();
        long off = Math.max(min, 0);
        guard = 0;
        while (off < max && guard++ < 100000) {
            GetMessageResult gr = store.getMessage("oracle_group", topic, qid, off, 32, 4 * 1024 * 1024, null);
            if (gr == null || gr.getStatus() != GetMessageStatus.FOUND) {
                if (gr != null && gr.getNextBeginOffset() > off) {
                    off = gr.getNextBeginOffset();
                    continue;
                }
                break;
            }
            for (ByteBuffer bb : gr.getMessageBufferList()) {
                MessageExt m = MessageDecoder.decode(bb.slice(), true, false);
                Map<String, Object> mm = new LinkedHashMap<>();
                mm.put("queue_offset", m.getQueueOffset());
                mm.put("physical_offset", m.getCommitLogOffset());
                mm.put("size", m.getStoreSize());
                mm.put("keys", m.getKeys());
                mm.put("tags", m.getTags());
                mm.put("store_timestamp", m.getStoreTimestamp());
                mm.put("body_b64", Base64.getEncoder().encodeToString(m.getBody() == null ? new byte[0] : m.getBody()));
                mm.put("uniq_key", m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
                msgs.add(mm);
            }
            long nb = gr.getNextBeginOffset();
            gr.release();
            if (nb <= off) {
                break;
            }
            off = nb;
        }
        q.put("messages", msgs);
        q.put("key", key);
        return q;
    }
}
