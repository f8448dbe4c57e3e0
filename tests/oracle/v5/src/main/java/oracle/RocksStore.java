package oracle;

import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.RocksDBMessageStore;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;
import org.apache.rocketmq.store.queue.CqUnit;
import org.apache.rocketmq.store.queue.RocksDBConsumeQueueStore;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;

/**
 * 5.x stores with storeType=defaultRocksDB (v5 module only). `rocksdb-write` writes through RocksDBMessageStore as
 * the broker wires it (consume queues in the RocksDB at consumequeue/), and the topic/group/offset metadata through
 * the broker's RocksDB config managers (config/topics/, config/subscriptionGroups/, config/consumerOffsets/), from
 * the scenario's "rocksdb": {"groups": {"G": {"Topic": {"0": 3}}}}. "end": "crash" leaves the store as a killed broker
 * would: the CQ RocksDB is flushed (its writes skip the WAL) and copied, with the checkpoint, after crash_after puts,
 * the commitlog holds every put, and abort is present. `rocksdb-read` loads a copy as the broker does and prints its
 * view: per queue min/max offsets and every unit, the max commitlog offset the CQ covers, and the metadata.
 * `rocksdb-restart` does the same in place (the store is left as the broker's shutdown leaves it).
 */
final class RocksStore {
    private RocksStore() {
    }

    static final String[] SNAPSHOT_ITEMS = {"consumequeue", "checkpoint", "index"};

    static Object run(Compat c, String cmd, Map<String, String> o) throws Exception {
        switch (cmd) {
            case "rocksdb-write":
                return write(c, Main.need(o, "scenario"), Main.need(o, "store"));
            case "rocksdb-read":
                return read(c, Main.need(o, "store"), o.get("conf"));
            case "rocksdb-restart":     // IN PLACE: the broker's load (recovery), start, shutdown
                return view(c, Paths.get(Main.need(o, "store")),
                    StoreConf.forRead(Main.need(o, "store"), o.get("conf")));
            default:
                throw new IllegalArgumentException(cmd);
        }
    }

    static MessageStoreConfig config(Map<String, Object> sc, String root) throws Exception {
        MessageStoreConfig cfg = StoreConf.build(sc, root, false);
        cfg.setStoreType("defaultRocksDB");
        return cfg;
    }

    static BrokerController controller(MessageStoreConfig cfg) throws Exception {
        MessageStoreConfig msc = new MessageStoreConfig();
        msc.setHaListenPort(0);
        msc.setStoreType("defaultRocksDB");
        msc.setStorePathRootDir(cfg.getStorePathRootDir());
        msc.setStorePathCommitLog(cfg.getStorePathCommitLog());
        NettyServerConfig nsc = new NettyServerConfig();
        nsc.setListenPort(0);
        BrokerConfig bc = new BrokerConfig();
        bc.setBrokerName("broker-a");      // the default is the host name, which names system topics/groups
        bc.setBrokerClusterName("DefaultCluster");
        return new BrokerController(bc, nsc, new NettyClientConfig(), msc);
    }

    @SuppressWarnings("unchecked")
    static void writeMetadata(MessageStoreConfig cfg, List<String> topics, Map<String, Object> groups)
        throws Exception {
        BrokerController ctl = controller(cfg);
        if (!ctl.getTopicConfigManager().load() || !ctl.getSubscriptionGroupManager().load()
            || !ctl.getConsumerOffsetManager().load()) {
            throw new IllegalStateException("RocksDB config managers did not load");
        }
        for (String t : topics) {
            ctl.getTopicConfigManager().updateTopicConfig(new TopicConfig(t, 8, 8));
        }
        for (Map.Entry<String, Object> g : new TreeMap<>(groups).entrySet()) {
            SubscriptionGroupConfig sg = new SubscriptionGroupConfig();
            sg.setGroupName(g.getKey());
            ctl.getSubscriptionGroupManager().updateSubscriptionGroupConfig(sg);
            for (Map.Entry<String, Object> t : ((Map<String, Object>) g.getValue()).entrySet()) {
                for (Map.Entry<String, Object> q : ((Map<String, Object>) t.getValue()).entrySet()) {
                    ctl.getConsumerOffsetManager().commitOffset("oracle", g.getKey(), t.getKey(),
                        Integer.parseInt(q.getKey()), ((Number) q.getValue()).longValue());
                }
            }
        }
        ctl.getTopicConfigManager().persist();
        ctl.getSubscriptionGroupManager().persist();
        ctl.getConsumerOffsetManager().persist();
        ctl.getTopicConfigManager().stop();
        ctl.getSubscriptionGroupManager().stop();
        ctl.getConsumerOffsetManager().stop();
    }

    static DefaultMessageStore newStore(MessageStoreConfig cfg, ConcurrentMap<String, TopicConfig> table)
        throws Exception {
        BrokerConfig bc = new BrokerConfig();
        bc.setLongPollingEnable(false);
        return new RocksDBMessageStore(cfg, null, (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap,
            properties) -> { }, bc, table);
    }

    static void flushCq(DefaultMessageStore store) throws Exception {
        ((RocksDBConsumeQueueStore) store.getQueueStore()).flush();
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> write(Compat c, String scenarioPath, String storeDir) throws Exception {
        Map<String, Object> sc = Writer.loadScenario(scenarioPath);
        Map<String, Object> rk = (Map<String, Object>) sc.getOrDefault("rocksdb", new LinkedHashMap<>());
        Map<String, Object> groups = (Map<String, Object>) rk.getOrDefault("groups", new LinkedHashMap<>());
        boolean crash = "crash".equals(String.valueOf(sc.getOrDefault("end", "shutdown")));
        int crashAfter = crash ? ((Number) sc.get("crash_after")).intValue() : -1;
        File dest = new File(storeDir);
        if (dest.exists() && dest.list() != null && dest.list().length > 0) {
            throw new IllegalStateException("store dir is not empty: " + storeDir);
        }
        Path work = crash ? Files.createTempDirectory("oracle-rocksdb").resolve("store") : dest.toPath();
        Path snap = crash ? Files.createTempDirectory("oracle-rocksdb-snap") : null;
        Map<String, Object> storeConfig = (Map<String, Object>) sc.getOrDefault("store_config", new LinkedHashMap<>());
        Map<String, Object> defaults = (Map<String, Object>) sc.getOrDefault("defaults", new LinkedHashMap<>());
        List<Map<String, Object>> msgs = Writer.expand((List<Object>) sc.get("messages"));
        MessageStoreConfig cfg = config(storeConfig, work.toString());
        LinkedHashSet<String> topics = new LinkedHashSet<>();
        for (Map<String, Object> m : msgs) {
            topics.add(String.valueOf(m.get("topic")));
        }
        writeMetadata(cfg, new ArrayList<>(topics), groups);
        ConcurrentMap<String, TopicConfig> table = new ConcurrentHashMap<>();
        for (String t : topics) {
            table.put(t, new TopicConfig(t, 8, 8));
        }
        DefaultMessageStore store = newStore(cfg, table);
        if (!store.load()) {
            throw new IllegalStateException("load() of the new store failed");
        }
        store.start();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("rocketmq_version", c.version());
        out.put("store_config", StoreConf.normalized(storeConfig));
        List<Object> puts = new ArrayList<>();
        Map<String, Long> labels = new LinkedHashMap<>();
        long bornBase = ((Number) defaults.getOrDefault("born_timestamp_start", 1700000000000L)).longValue();
        long bornStep = ((Number) defaults.getOrDefault("born_timestamp_step", 1000L)).longValue();
        long interval = ((Number) sc.getOrDefault("put_interval_ms", 2)).longValue();
        long seed = ((Number) sc.getOrDefault("seed", 42)).longValue();
        Map<String, Object> crashInfo = null;
        for (int i = 0; i <= msgs.size(); i++) {
            if (i == crashAfter) {
                Writer.waitDispatch(store, 10000);
                flushCq(store);
                store.getStoreCheckpoint().flush();
                for (String item : SNAPSHOT_ITEMS) {
                    if (Files.exists(work.resolve(item))) {
                        Files2.copyRecursive(work.resolve(item), snap.resolve(item));
                    }
                }
                crashInfo = new LinkedHashMap<>();
                crashInfo.put("snapshot_after_puts", i);
                crashInfo.put("dispatched_up_to_phy_offset", store.getMaxPhyOffset());
                crashInfo.put("cq_max_phy_offset", store.getQueueStore().getMaxPhyOffsetInConsumeQueue());
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
            Writer.waitDispatch(store, 10000);
            if (interval > 0) {
                Thread.sleep(interval);
            }
        }
        out.put("puts", puts);
        out.put("max_phy_offset", store.getMaxPhyOffset());
        if (crash) {
            store.getCommitLog().flush();
            Files2.copyRecursive(work, dest.toPath());
            for (String item : SNAPSHOT_ITEMS) {
                Files2.deleteRecursive(dest.toPath().resolve(item));
                if (Files.exists(snap.resolve(item))) {
                    Files2.copyRecursive(snap.resolve(item), dest.toPath().resolve(item));
                }
            }
            // a copy of a live RocksDB directory keeps its LOCK file (an empty file; RocksDB's lock is an fcntl lock)
            crashInfo.put("restored_from_snapshot", java.util.Arrays.asList(SNAPSHOT_ITEMS));
            crashInfo.put("abort_present", Files.exists(dest.toPath().resolve("abort")));
            out.put("end", "crash");
            out.put("crash", crashInfo);
        } else {
            store.shutdown();
            out.put("end", "shutdown");
            out.put("abort_present", new File(storeDir, "abort").exists());
        }
        return out;
    }

    static Map<String, Object> read(Compat c, String storeDir, String confPath) throws Exception {
        Map<String, Object> sc = StoreConf.forRead(storeDir, confPath);
        Path tmp = Files.createTempDirectory("oracle-rocksdb-read");
        try {
            Path copy = tmp.resolve("store");
            Files2.copyRecursive(Paths.get(storeDir), copy);
            return view(c, copy, sc);
        } finally {
            Files2.deleteRecursive(tmp);
        }
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> view(Compat c, Path root, Map<String, Object> sc) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("rocketmq_version", c.version());
        out.put("recovery", Files.exists(root.resolve("abort")) ? "abnormal" : "normal");
        MessageStoreConfig cfg = config(sc, root.toString());
        BrokerController ctl = controller(cfg);
        boolean metaOk = ctl.getTopicConfigManager().load() && ctl.getSubscriptionGroupManager().load()
            && ctl.getConsumerOffsetManager().load();
        out.put("metadata_load_ok", metaOk);
        Map<String, Object> topicsOut = new TreeMap<>();
        ConcurrentMap<String, TopicConfig> table = new ConcurrentHashMap<>();
        for (Map.Entry<String, TopicConfig> e : ctl.getTopicConfigManager().getTopicConfigTable().entrySet()) {
            TopicConfig tc = e.getValue();
            table.put(e.getKey(), tc);
            Map<String, Object> t = new LinkedHashMap<>();
            t.put("readQueueNums", tc.getReadQueueNums());
            t.put("writeQueueNums", tc.getWriteQueueNums());
            t.put("perm", tc.getPerm());
            topicsOut.put(e.getKey(), t);
        }
        out.put("topics", topicsOut);
        out.put("groups", new ArrayList<>(new TreeMap<>(
            ctl.getSubscriptionGroupManager().getSubscriptionGroupTable()).keySet()));
        Map<String, Object> offs = new TreeMap<>();
        for (Map.Entry<String, ConcurrentMap<Integer, Long>> e
            : ctl.getConsumerOffsetManager().getOffsetTable().entrySet()) {
            offs.put(e.getKey(), new TreeMap<>(e.getValue()));
        }
        out.put("offsets", offs);
        ctl.getTopicConfigManager().stop();
        ctl.getSubscriptionGroupManager().stop();
        ctl.getConsumerOffsetManager().stop();

        DefaultMessageStore store = newStore(cfg, table);
        boolean ok = store.load();
        out.put("load_ok", ok);
        if (!ok) {
            return out;
        }
        out.put("cq_max_phy_offset_after_load", store.getQueueStore().getMaxPhyOffsetInConsumeQueue());
        store.start();
        Writer.waitDispatch(store, 60000);
        out.put("max_phy_offset", store.getMaxPhyOffset());
        out.put("cq_max_phy_offset", store.getQueueStore().getMaxPhyOffsetInConsumeQueue());
        List<Object> queues = new ArrayList<>();
        for (String topic : new TreeMap<>(table).keySet()) {
            for (int q = 0; q < 8; q++) {
                long max = store.getMaxOffsetInQueue(topic, q);
                if (max <= 0) {
                    continue;
                }
                long min = store.getMinOffsetInQueue(topic, q);
                Map<String, Object> qv = new LinkedHashMap<>();
                qv.put("topic", topic);
                qv.put("queue_id", q);
                qv.put("min_offset", min);
                qv.put("max_offset", max);
                ConsumeQueueInterface cq = store.getConsumeQueue(topic, q);
                List<Object> units = new ArrayList<>();
                for (long off = min; off < max; off++) {
                    CqUnit u = cq.get(off);
                    if (u == null) {
                        units.add(null);
                        continue;
                    }
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("queue_offset", off);
                    m.put("pos", u.getPos());
                    m.put("size", u.getSize());
                    m.put("tags_code", u.getTagsCode());
                    m.put("store_time", store.getMessageStoreTimeStamp(topic, q, off));
                    units.add(m);
                }
                qv.put("units", units);
                // getOffsetInQueueByTime (LOWER boundary) around every unit's store time
                java.util.TreeSet<Long> ts = new java.util.TreeSet<>();
                ts.add(0L);
                ts.add(Long.MAX_VALUE);
                for (Object x : units) {
                    if (x != null) {
                        long t = (Long) ((Map<String, Object>) x).get("store_time");
                        ts.add(t - 1);
                        ts.add(t);
                        ts.add(t + 1);
                    }
                }
                List<Object> byTime = new ArrayList<>();
                for (long t : ts) {
                    byTime.add(java.util.Arrays.asList(t, store.getOffsetInQueueByTime(topic, q, t)));
                }
                qv.put("by_time", byTime);
                queues.add(qv);
            }
        }
        out.put("queues", queues);
        store.shutdown();
        return out;
    }
}
