package oracle;

import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.zip.Deflater;
import java.util.zip.DeflaterOutputStream;

/** `write`: puts a scenario's messages through the real DefaultMessageStore. */
final class Writer {
    private Writer() {
    }

    /** Directories/files that the crash end restores from the snapshot taken after crash_after puts. */
    /** Same as the jar manifest's Add-Opens/Add-Exports (needed by MappedFile's unmap on 4.9). */
    static final List<String> JVM_FLAGS = java.util.Arrays.asList(
        "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
        "--add-opens", "java.base/java.lang=ALL-UNNAMED", "--add-opens", "java.base/java.util=ALL-UNNAMED",
        "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED", "--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
        "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED");

    static final String[] SNAPSHOT_ITEMS = {"consumequeue", "index", "checkpoint", "batchconsumequeue"};

    @SuppressWarnings("unchecked")
    static Map<String, Object> write(Compat c, String scenarioPath, String storeDir) throws Exception {
        Map<String, Object> sc = loadScenario(scenarioPath);
        String end = String.valueOf(sc.getOrDefault("end", "shutdown"));
        if (!end.equals("crash")) {
            return doWrite(c, sc, storeDir, null);
        }
        Path snapshot = Files.createTempDirectory("oracle-snapshot");
        Path result = snapshot.resolve("result.json");
        try {
            List<String> cmd = new ArrayList<>();
            cmd.add(Paths.get(System.getProperty("java.home"), "bin", "java").toString());
            cmd.addAll(JVM_FLAGS);
            cmd.add("-cp");
            cmd.add(System.getProperty("java.class.path"));
            cmd.add("oracle.Main");
            cmd.add("write-child");
            cmd.add("--scenario");
            cmd.add(scenarioPath);
            cmd.add("--store");
            cmd.add(storeDir);
            cmd.add("--snapshot");
            cmd.add(snapshot.resolve("snap").toString());
            cmd.add("--result");
            cmd.add(result.toString());
            Process p = new ProcessBuilder(cmd).redirectOutput(ProcessBuilder.Redirect.INHERIT)
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
            if (!p.waitFor(600, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                throw new IllegalStateException("write-child timed out");
            }
            if (p.exitValue() != 0 || !Files.exists(result)) {
                throw new IllegalStateException("write-child failed, exit " + p.exitValue());
            }
            Map<String, Object> r = Json.parseObject(new String(Files.readAllBytes(result), StandardCharsets.UTF_8));
            // the "crash": the writer JVM was halted (no shutdown, abort file left behind); now put the older
            // consume queues / index / checkpoint (copied after crash_after puts had been dispatched) back.
            Path store = Paths.get(storeDir);
            Path snap = snapshot.resolve("snap");
            for (String item : SNAPSHOT_ITEMS) {
                Files2.deleteRecursive(store.resolve(item));
                if (Files.exists(snap.resolve(item))) {
                    Files2.copyRecursive(snap.resolve(item), store.resolve(item));
                }
            }
            Map<String, Object> crash = (Map<String, Object>) r.get("crash");
            crash.put("restored_from_snapshot", java.util.Arrays.asList(SNAPSHOT_ITEMS));
            crash.put("abort_present", Files.exists(store.resolve("abort")));
            return r;
        } finally {
            Files2.deleteRecursive(snapshot);
        }
    }

    static void writeChild(Compat c, String scenarioPath, String storeDir, String snapshot, String resultPath)
        throws Exception {
        Map<String, Object> sc = loadScenario(scenarioPath);
        Map<String, Object> r = doWrite(c, sc, storeDir, snapshot);
        Files.write(Paths.get(resultPath), Json.write(r).getBytes(StandardCharsets.UTF_8));
        System.err.flush();
        Runtime.getRuntime().halt(0); // crash: no shutdown(), abort stays, nothing more is flushed
    }

    static Map<String, Object> loadScenario(String path) throws Exception {
        return Json.parseObject(new String(Files.readAllBytes(Paths.get(path)), StandardCharsets.UTF_8));
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> doWrite(Compat c, Map<String, Object> sc, String storeDir, String snapshot)
        throws Exception {
        Map<String, Object> storeConfig = (Map<String, Object>) sc.getOrDefault("store_config", new LinkedHashMap<>());
        Map<String, Object> defaults = (Map<String, Object>) sc.getOrDefault("defaults", new LinkedHashMap<>());
        long seed = ((Number) sc.getOrDefault("seed", 42)).longValue();
        long interval = ((Number) sc.getOrDefault("put_interval_ms", 2)).longValue();
        List<Map<String, Object>> msgs = expand((List<Object>) sc.get("messages"));
        int crashAfter = snapshot == null ? -1 : ((Number) sc.get("crash_after")).intValue();
        // lets the flush service record the last flushed message's time in the checkpoint before the snapshot
        long snapshotDelay = ((Number) sc.getOrDefault("snapshot_delay_ms", 0)).longValue();

        File root = new File(storeDir);
        // "append": true continues an existing store (normal load, then more puts): replicas that diverge
        boolean append = Boolean.TRUE.equals(sc.get("append"));
        if (!append && root.exists() && root.list() != null && root.list().length > 0) {
            throw new IllegalStateException("store dir is not empty: " + storeDir);
        }
        MessageStoreConfig cfg = StoreConf.build(storeConfig, storeDir);
        org.apache.rocketmq.broker.filter.ConsumerFilterManager filters = Filters.create(sc.get("sql92_filters"), cfg);
        LinkedHashSet<String> topics = new LinkedHashSet<>();
        for (Map<String, Object> m : msgs) {
            topics.add(String.valueOf(m.get("topic")));
        }
        DefaultMessageStore store = c.newStore(cfg, new ArrayList<>(topics));
        Hooks.call("oracle.BatchCq", "prepareWrite", store, sc, storeDir); // 5.x BatchCQ topics ("bcq_topics")
        Filters.install(store, filters);
        if (!store.load()) {
            throw new IllegalStateException("load() of the new store failed");
        }
        store.start();
        DLedger.awaitLeader(store, 15000);

        Map<String, Object> out = new LinkedHashMap<>();
        out.put("rocketmq_version", c.version());
        out.put("store_config", StoreConf.normalized(storeConfig));
        List<Object> puts = new ArrayList<>();
        Map<String, Long> labels = new LinkedHashMap<>();
        Map<String, Object> crash = null;
        long bornBase = ((Number) defaults.getOrDefault("born_timestamp_start", 1700000000000L)).longValue();
        long bornStep = ((Number) defaults.getOrDefault("born_timestamp_step", 1000L)).longValue();

        for (int i = 0; i < msgs.size(); i++) {
            if (i == crashAfter) {
                Thread.sleep(snapshotDelay);
                crash = snapshot(store, storeDir, snapshot, i);
            }
            Map<String, Object> m = new LinkedHashMap<>(defaults);
            m.putAll(msgs.get(i));
            if (m.containsKey("sleep_before_ms")) {
                Thread.sleep(((Number) m.get("sleep_before_ms")).longValue());
            }
            long born = m.containsKey("born_timestamp") ? ((Number) m.get("born_timestamp")).longValue()
                : bornBase + bornStep * i;
            PutMessageResult pr;
            Map<String, Object> pi = new LinkedHashMap<>();
            pi.put("index", i);
            if (m.containsKey("batch")) {
                pr = putBatch(c, store, m, born, seed + i);
                pi.put("batch", ((List<Object>) m.get("batch")).size());
            } else {
                MessageExt inner = c.newInner();
                fill(inner, m, born, seed + i, labels);
                pr = c.put(store, inner, cfg);
                pi.put("uniq_key", inner.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            }
            pi.put("topic", String.valueOf(m.get("topic")));
            pi.put("status", pr.getPutMessageStatus().toString());
            if (pr.getAppendMessageResult() != null) {
                pi.put("wrote_offset", pr.getAppendMessageResult().getWroteOffset());
                pi.put("wrote_bytes", pr.getAppendMessageResult().getWroteBytes());
                pi.put("logics_offset", pr.getAppendMessageResult().getLogicsOffset());
                pi.put("msg_id", pr.getAppendMessageResult().getMsgId());
                if (m.containsKey("label")) {
                    labels.put(String.valueOf(m.get("label")), pr.getAppendMessageResult().getWroteOffset());
                }
            }
            puts.add(pi);
            if (!pr.isOk() && !Boolean.TRUE.equals(m.get("expect_failure"))) {
                throw new IllegalStateException("put " + i + " failed: " + pr);
            }
            if (snapshot == null || i < crashAfter) {
                waitDispatch(store, 10000);
            }
            if (interval > 0) {
                Thread.sleep(interval);
            }
        }
        if (crashAfter >= msgs.size()) {
            Thread.sleep(snapshotDelay);
            crash = snapshot(store, storeDir, snapshot, msgs.size());
        }
        out.put("puts", puts);
        out.put("max_phy_offset", store.getMaxPhyOffset());
        if (snapshot != null) {
            store.getCommitLog().flush();
            out.put("end", "crash");
            out.put("crash", crash);
        } else {
            waitDispatch(store, 10000);
            store.shutdown();
            out.put("end", "shutdown");
            out.put("abort_present", new File(storeDir, "abort").exists());
        }
        return out;
    }

    static Map<String, Object> snapshot(DefaultMessageStore store, String storeDir, String snapshot, int afterPuts)
        throws Exception {
        waitDispatch(store, 10000);
        Thread.sleep(50);
        store.getStoreCheckpoint().flush();
        Path snap = Paths.get(snapshot);
        Files.createDirectories(snap);
        for (String item : SNAPSHOT_ITEMS) {
            Path p = Paths.get(storeDir, item);
            if (Files.exists(p)) {
                Files2.copyRecursive(p, snap.resolve(item));
            }
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("snapshot_after_puts", afterPuts);
        r.put("dispatched_up_to_phy_offset", store.getMaxPhyOffset());
        return r;
    }

    static void waitDispatch(DefaultMessageStore store, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (store.dispatchBehindBytes() > 0) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("dispatch did not catch up");
            }
            Thread.sleep(1);
        }
    }

    // ---------------------------------------------------------------- scenario expansion

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> expand(List<Object> entries) {
        List<Map<String, Object>> r = new ArrayList<>();
        for (Object o : entries) {
            Map<String, Object> e = (Map<String, Object>) o;
            if (e.containsKey("repeat")) {
                int n = ((Number) e.get("repeat")).intValue();
                for (int i = 0; i < n; i++) {
                    Map<String, Object> copy = new LinkedHashMap<>(e);
                    copy.remove("repeat");
                    r.add((Map<String, Object>) subst(copy, i));
                }
            } else {
                r.add(e);
            }
        }
        return r;
    }

    @SuppressWarnings("unchecked")
    static Object subst(Object o, int i) {
        if (o instanceof String) {
            String s = (String) o;
            if (s.startsWith("cycle:")) {
                return i % Integer.parseInt(s.substring(6));
            }
            return s.replace("{i}", Integer.toString(i)).replace("{i%3}", Integer.toString(i % 3))
                .replace("{i%5}", Integer.toString(i % 5)).replace("{i%7}", Integer.toString(i % 7));
        }
        if (o instanceof Map) {
            Map<String, Object> m = new LinkedHashMap<>();
            for (Map.Entry<String, Object> e : ((Map<String, Object>) o).entrySet()) {
                m.put(e.getKey(), subst(e.getValue(), i));
            }
            return m;
        }
        if (o instanceof List) {
            List<Object> l = new ArrayList<>();
            for (Object x : (List<Object>) o) {
                l.add(subst(x, i));
            }
            return l;
        }
        return o;
    }

    // ---------------------------------------------------------------- message building

    static byte[] body(Map<String, Object> m, long seed) {
        if (m.containsKey("body_hex")) {
            String h = String.valueOf(m.get("body_hex"));
            byte[] b = new byte[h.length() / 2];
            for (int i = 0; i < b.length; i++) {
                b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
            }
            return b;
        }
        if (m.containsKey("body_b64")) {
            return Base64.getDecoder().decode(String.valueOf(m.get("body_b64")));
        }
        if (m.containsKey("body_random")) {
            byte[] b = new byte[((Number) m.get("body_random")).intValue()];
            new Random(seed).nextBytes(b);
            return b;
        }
        if (m.containsKey("body_repeat")) {
            // {"body_repeat": "abc", "body_len": 5000} -> text repeated to that many bytes (compressible)
            byte[] unit = String.valueOf(m.get("body_repeat")).getBytes(StandardCharsets.UTF_8);
            byte[] b = new byte[((Number) m.get("body_len")).intValue()];
            for (int i = 0; i < b.length; i++) {
                b[i] = unit[i % unit.length];
            }
            return b;
        }
        Object t = m.get("body");
        return t == null ? new byte[0] : String.valueOf(t).getBytes(StandardCharsets.UTF_8);
    }

    static byte[] zlib(byte[] b) throws Exception {
        ByteArrayOutputStream bos = new ByteArrayOutputStream();
        Deflater d = new Deflater(5);
        try (DeflaterOutputStream dos = new DeflaterOutputStream(bos, d)) {
            dos.write(b);
        }
        d.end();
        return bos.toByteArray();
    }

    static InetSocketAddress host(String s) throws Exception {
        String h;
        int port;
        if (s.startsWith("[")) {
            int close = s.indexOf(']');
            h = s.substring(1, close);
            port = Integer.parseInt(s.substring(close + 2));
        } else {
            int colon = s.lastIndexOf(':');
            h = s.substring(0, colon);
            port = Integer.parseInt(s.substring(colon + 1));
        }
        return new InetSocketAddress(InetAddress.getByName(h), port);
    }

    @SuppressWarnings("unchecked")
    static void applyUserProps(Message msg, Map<String, Object> m) {
        if (m.get("tags") != null) {
            msg.setTags(String.valueOf(m.get("tags")));
        }
        Object keys = m.get("keys");
        if (keys instanceof List && !((List<Object>) keys).isEmpty()) {
            List<String> ks = new ArrayList<>();
            for (Object k : (List<Object>) keys) {
                ks.add(String.valueOf(k));
            }
            msg.setKeys(String.join(MessageConst.KEY_SEPARATOR, ks));
        } else if (keys instanceof String) {
            msg.setKeys((String) keys);
        }
        Object props = m.get("properties");
        if (props instanceof Map) {
            for (Map.Entry<String, Object> e : ((Map<String, Object>) props).entrySet()) {
                MessageAccessor.putProperty(msg, e.getKey(), String.valueOf(e.getValue()));
            }
        }
        Object uk = m.get("uniq_key");
        if (uk instanceof String) {
            MessageAccessor.putProperty(msg, MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, (String) uk);
        } else if (!Boolean.FALSE.equals(uk)) {
            MessageClientIDSetter.setUniqID(msg); // what the producer does (broker creates one if absent)
        }
    }

    static void fill(MessageExt msg, Map<String, Object> m, long born, long seed, Map<String, Long> labels)
        throws Exception {
        msg.setTopic(String.valueOf(m.get("topic")));
        msg.setQueueId(((Number) m.getOrDefault("queue_id", 0)).intValue());
        msg.setFlag(((Number) m.getOrDefault("flag", 0)).intValue());
        int sysFlag = 0;
        byte[] b = body(m, seed);
        if (Boolean.TRUE.equals(m.get("compressed")) && m.get("compression") != null) {
            b = Codecs.compress(m, b); // the broker's own Compressor (lz4, zstd, zlib)
            sysFlag |= Codecs.flags(m);
        } else if (Boolean.TRUE.equals(m.get("compressed"))) {
            b = zlib(b);
            sysFlag |= MessageSysFlag.COMPRESSED_FLAG;
        }
        msg.setBody(b);
        applyUserProps(msg, m);
        if (m.get("delay_level") != null) {
            msg.setDelayTimeLevel(((Number) m.get("delay_level")).intValue());
        }
        if (m.get("cluster") != null) {
            MessageAccessor.putProperty(msg, MessageConst.PROPERTY_CLUSTER, String.valueOf(m.get("cluster")));
        }
        String tran = String.valueOf(m.getOrDefault("transaction", "none"));
        switch (tran) {
            case "prepared": sysFlag |= MessageSysFlag.TRANSACTION_PREPARED_TYPE; break;
            case "commit": sysFlag |= MessageSysFlag.TRANSACTION_COMMIT_TYPE; break;
            case "rollback": sysFlag |= MessageSysFlag.TRANSACTION_ROLLBACK_TYPE; break;
            case "none": break;
            default: throw new IllegalArgumentException("transaction: " + tran);
        }
        if (m.get("prepared_ref") != null) {
            Long off = labels.get(String.valueOf(m.get("prepared_ref")));
            if (off == null) {
                throw new IllegalArgumentException("unknown prepared_ref label " + m.get("prepared_ref"));
            }
            msg.setPreparedTransactionOffset(off);
        }
        InetSocketAddress bh = host(String.valueOf(m.getOrDefault("born_host", "192.168.1.10:54321")));
        InetSocketAddress sh = host(String.valueOf(m.getOrDefault("store_host", "192.168.1.20:10911")));
        if (bh.getAddress() instanceof Inet6Address) {
            sysFlag |= MessageSysFlag.BORNHOST_V6_FLAG;
        }
        if (sh.getAddress() instanceof Inet6Address) {
            sysFlag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG;
        }
        sysFlag |= ((Number) m.getOrDefault("sys_flag_extra", 0)).intValue();
        msg.setSysFlag(sysFlag);
        msg.setBornTimestamp(born);
        msg.setBornHost(bh);
        msg.setStoreHost(sh);
        msg.setReconsumeTimes(((Number) m.getOrDefault("reconsume_times", 0)).intValue());
    }

    @SuppressWarnings("unchecked")
    static PutMessageResult putBatch(Compat c, DefaultMessageStore store, Map<String, Object> m, long born, long seed)
        throws Exception {
        String topic = String.valueOf(m.get("topic"));
        List<Message> inner = new ArrayList<>();
        int k = 0;
        for (Object o : (List<Object>) m.get("batch")) {
            Map<String, Object> im = (Map<String, Object>) o;
            Message msg = new Message(topic, body(im, seed * 1000 + k++));
            msg.setFlag(((Number) im.getOrDefault("flag", 0)).intValue());
            applyUserProps(msg, im);
            inner.add(msg);
        }
        byte[] encoded = MessageDecoder.encodeMessages(inner);
        MessageExt t = new MessageExt();
        t.setTopic(topic);
        t.setQueueId(((Number) m.getOrDefault("queue_id", 0)).intValue());
        t.setFlag(((Number) m.getOrDefault("flag", 0)).intValue());
        InetSocketAddress bh = host(String.valueOf(m.getOrDefault("born_host", "192.168.1.10:54321")));
        InetSocketAddress sh = host(String.valueOf(m.getOrDefault("store_host", "192.168.1.20:10911")));
        int sysFlag = 0;
        if (bh.getAddress() instanceof Inet6Address) {
            sysFlag |= MessageSysFlag.BORNHOST_V6_FLAG;
        }
        if (sh.getAddress() instanceof Inet6Address) {
            sysFlag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG;
        }
        t.setSysFlag(sysFlag);
        t.setBornTimestamp(born);
        t.setBornHost(bh);
        t.setStoreHost(sh);
        t.setReconsumeTimes(((Number) m.getOrDefault("reconsume_times", 0)).intValue());
        Object props = m.get("batch_properties");
        if (props instanceof Map) {
            for (Map.Entry<String, Object> e : ((Map<String, Object>) props).entrySet()) {
                MessageAccessor.putProperty(t, e.getKey(), String.valueOf(e.getValue()));
            }
        }
        if (m.get("cluster") != null) {
            MessageAccessor.putProperty(t, MessageConst.PROPERTY_CLUSTER, String.valueOf(m.get("cluster")));
        }
        if (Boolean.TRUE.equals(m.get("inner_batch"))) { // 5.x: one record, one BatchConsumeQueue unit
            return (PutMessageResult) Hooks.call("oracle.BatchCq", "putInnerBatch", store, t, encoded);
        }
        return c.putBatch(store, t, encoded);
    }
}
