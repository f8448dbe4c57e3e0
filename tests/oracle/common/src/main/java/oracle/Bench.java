package oracle;

import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.io.File;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

/** bench-write / bench-recover. */
final class Bench {
    private Bench() {
    }

    static final String TOPIC = "BenchTopic";
    static final int QUEUES = 4;

    static Map<String, Object> write(Compat c, String storeDir, long count, int size, int fileSize) throws Exception {
        File root = new File(storeDir);
        if (root.exists() && root.list() != null && root.list().length > 0) {
            throw new IllegalStateException("store dir is not empty: " + storeDir);
        }
        Map<String, Object> sc = new LinkedHashMap<>();
        sc.put("mappedFileSizeCommitLog", (long) fileSize);
        MessageStoreConfig cfg = StoreConf.build(sc, storeDir);
        DefaultMessageStore store = c.newStore(cfg, Collections.singletonList(TOPIC));
        if (!store.load()) {
            throw new IllegalStateException("load failed");
        }
        store.start();
        byte[] body = new byte[size];
        new Random(7).nextBytes(body);
        InetSocketAddress bh = new InetSocketAddress(InetAddress.getByName("192.168.1.10"), 54321);
        InetSocketAddress sh = new InetSocketAddress(InetAddress.getByName("192.168.1.20"), 10911);
        long t0 = System.nanoTime();
        long step = Math.max(1, count / 10);
        for (long i = 0; i < count; i++) {
            MessageExt m = c.newInner();
            m.setTopic(TOPIC);
            m.setQueueId((int) (i % QUEUES));
            m.setBody(body);
            m.setTags("T" + (i % 8));
            m.setKeys("k" + i);
            MessageClientIDSetter.setUniqID(m);
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_CLUSTER, "DefaultCluster");
            m.setBornTimestamp(System.currentTimeMillis());
            m.setBornHost(bh);
            m.setStoreHost(sh);
            PutMessageResult r = c.put(store, m, cfg);
            if (!r.isOk()) {
                throw new IllegalStateException("put " + i + " failed: " + r);
            }
            if ((i + 1) % step == 0) {
                System.err.printf("bench-write: %d/%d%n", i + 1, count);
            }
        }
        long deadline = System.currentTimeMillis() + 600000;
        while (store.dispatchBehindBytes() > 0 && System.currentTimeMillis() < deadline) {
            Thread.sleep(10);
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        long maxOff = store.getMaxPhyOffset();
        store.shutdown();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("rocketmq_version", c.version());
        out.put("messages", count);
        out.put("body_size", size);
        out.put("max_offset", maxOff);
        out.put("file_size", fileSize);
        out.put("seconds", secs);
        out.put("abort_present", new File(storeDir, "abort").exists());
        return out;
    }

    static Map<String, Object> recover(Compat c, String storeDir, boolean abnormal, String conf) throws Exception {
        Map<String, Object> sc = StoreConf.forRead(storeDir, conf);
        sc.put("checkCRCOnRecover", true);
        if (abnormal) {
            new File(storeDir, "abort").createNewFile();
        }
        boolean wasAbnormal = new File(storeDir, "abort").exists();
        MessageStoreConfig cfg = StoreConf.build(sc, storeDir, false);
        DefaultMessageStore store = c.newStore(cfg, Collections.emptyList());
        long t0 = System.nanoTime();
        boolean ok = store.load();
        double secs = (System.nanoTime() - t0) / 1e9;
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("rocketmq_version", c.version());
        out.put("recovery", wasAbnormal ? "abnormal" : "normal");
        out.put("load_ok", ok);
        out.put("seconds", secs);
        out.put("min_offset", store.getMinPhyOffset());
        out.put("max_offset", store.getMaxPhyOffset());
        out.put("bytes", store.getMaxPhyOffset() - store.getMinPhyOffset());
        long msgs = 0;
        for (Map.Entry<String, List<Integer>> e : c.queueIds(store).entrySet()) {
            for (int q : e.getValue()) {
                msgs += c.maxOffsetInQueue(store, e.getKey(), q) - store.getMinOffsetInQueue(e.getKey(), q);
            }
        }
        out.put("messages", msgs);
        return out;
    }
}
