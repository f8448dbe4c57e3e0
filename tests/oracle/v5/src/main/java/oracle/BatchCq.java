package oracle;

import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBatch;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.remoting.protocol.DataVersion;
import org.apache.rocketmq.remoting.protocol.body.TopicConfigSerializeWrapper;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.logfile.MappedFile;
import org.apache.rocketmq.store.queue.BatchConsumeQueue;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentMap;

/**
 * 5.x batch consume queues (topic attribute queue.type=BatchCQ) and inner batches, reached from the common code
 * through {@link Hooks} (the class does not exist in the 4.9 build).
 */
public final class BatchCq {
    private BatchCq() {
    }

    static final String QUEUE_TYPE = "queue.type";

    /** write: scenario "bcq_topics" become BatchCQ topics of the store; config/topics.json as the broker persists it. */
    @SuppressWarnings("unchecked")
    public static void prepareWrite(DefaultMessageStore store, Map<String, Object> sc, String storeDir) throws Exception {
        Object l = sc.get("bcq_topics");
        if (!(l instanceof List)) {
            return;
        }
        ConcurrentMap<String, TopicConfig> table = store.getTopicConfigs();
        for (Object o : (List<Object>) l) {
            String t = String.valueOf(o);
            TopicConfig tc = table.computeIfAbsent(t, k -> new TopicConfig(k, 8, 8));
            Map<String, String> attrs = new LinkedHashMap<>(tc.getAttributes());
            attrs.put(QUEUE_TYPE, "BatchCQ");
            tc.setAttributes(attrs);
        }
        TopicConfigSerializeWrapper w = new TopicConfigSerializeWrapper();
        w.setTopicConfigTable(table);
        w.setDataVersion(new DataVersion());
        File cfg = new File(storeDir, "config");
        cfg.mkdirs();
        Files.write(new File(cfg, "topics.json").toPath(), w.toJson(true).getBytes(StandardCharsets.UTF_8));
    }

    /** read/restart: the topic configs of config/topics.json (the broker refuses a batchconsumequeue/ dir otherwise). */
    @SuppressWarnings("unchecked")
    public static void prepareRead(DefaultMessageStore store, String storeDir) throws Exception {
        File f = new File(storeDir, "config/topics.json");
        if (!f.isFile()) {
            return;
        }
        Map<String, Object> doc = Json.parseObject(new String(Files.readAllBytes(f.toPath()), StandardCharsets.UTF_8));
        Object t = doc.get("topicConfigTable");
        if (!(t instanceof Map)) {
            return;
        }
        for (Map.Entry<String, Object> e : ((Map<String, Object>) t).entrySet()) {
            Map<String, Object> tc = (Map<String, Object>) e.getValue();
            Object attrs = tc.get("attributes");
            if (!(attrs instanceof Map) || ((Map<String, Object>) attrs).isEmpty()) {
                continue;
            }
            TopicConfig c = new TopicConfig(e.getKey(), 8, 8);
            Map<String, String> a = new LinkedHashMap<>();
            for (Map.Entry<String, Object> x : ((Map<String, Object>) attrs).entrySet()) {
                a.put(x.getKey(), String.valueOf(x.getValue()));
            }
            c.setAttributes(a);
            store.getTopicConfigs().put(e.getKey(), c);
        }
    }

    /** An inner batch, prepared as SendMessageProcessor does for a BatchCQ topic, put with putMessage. */
    public static PutMessageResult putInnerBatch(DefaultMessageStore store, MessageExt t, byte[] encoded) {
        MessageExtBatch b = new MessageExtBatch();
        b.setTopic(t.getTopic());
        b.setQueueId(t.getQueueId());
        b.setFlag(t.getFlag());
        MessageAccessor.setProperties(b, t.getProperties());
        if (MessageClientIDSetter.getUniqID(b) == null) {
            MessageClientIDSetter.setUniqID(b); // the 5.x producer gives an inner batch a UNIQ_KEY
        }
        b.setBody(encoded);
        b.setBornTimestamp(t.getBornTimestamp());
        b.setBornHost(t.getBornHost());
        b.setStoreHost(t.getStoreHost());
        b.setReconsumeTimes(t.getReconsumeTimes());
        b.setSysFlag(t.getSysFlag() | MessageSysFlag.NEED_UNWRAP_FLAG | MessageSysFlag.INNER_BATCH_FLAG);
        b.setInnerBatch(true);
        int innerNum = MessageDecoder.countInnerMsgNum(ByteBuffer.wrap(encoded));
        MessageAccessor.putProperty(b, MessageConst.PROPERTY_INNER_NUM, String.valueOf(innerNum));
        b.setPropertiesString(MessageDecoder.messageProperties2String(b.getProperties()));
        return store.putMessage(b);
    }

    /** The broker's view of every batch consume queue: files, raw units, getMessage per offset, time search. */
    public static void view(DefaultMessageStore store, Map<String, Object> out) throws Exception {
        if (store.getBrokerStatsManager() == null) { // getMessage records fall-behind stats on it
            java.lang.reflect.Field f = DefaultMessageStore.class.getDeclaredField("brokerStatsManager");
            f.setAccessible(true);
            f.set(store, new org.apache.rocketmq.store.stats.BrokerStatsManager("oracle", false));
        }
        List<Object> queues = new ArrayList<>();
        Map<String, ConcurrentMap<Integer, ConsumeQueueInterface>> tbl = new TreeMap<>(store.getConsumeQueueTable());
        for (Map.Entry<String, ConcurrentMap<Integer, ConsumeQueueInterface>> e : tbl.entrySet()) {
            for (Map.Entry<Integer, ConsumeQueueInterface> qe : new TreeMap<>(e.getValue()).entrySet()) {
                if (!(qe.getValue() instanceof BatchConsumeQueue)) {
                    continue;
                }
                queues.add(queue(store, e.getKey(), qe.getKey(), (BatchConsumeQueue) qe.getValue()));
            }
        }
        if (!queues.isEmpty()) { // only stores with batch queues get the key (other manifests stay as they are)
            out.put("batch_queues", queues);
        }
    }

    static Map<String, Object> queue(DefaultMessageStore store, String topic, int qid, BatchConsumeQueue bcq) {
        Map<String, Object> q = new LinkedHashMap<>();
        q.put("topic", topic);
        q.put("queue_id", qid);
        q.put("min_offset", bcq.getMinOffsetInQueue());
        q.put("max_offset", bcq.getMaxOffsetInQueue());
        q.put("file_size", bcq.getMappedFileQueue().getMappedFileSize());
        List<Object> files = new ArrayList<>();
        List<Object> units = new ArrayList<>();
        TreeSet<Long> times = new TreeSet<>();
        for (MappedFile mf : bcq.getMappedFileQueue().getMappedFiles()) {
            Map<String, Object> fm = new LinkedHashMap<>();
            fm.put("name", new File(mf.getFileName()).getName());
            fm.put("from_offset", mf.getFileFromOffset());
            fm.put("read_position", mf.getReadPosition());
            files.add(fm);
            ByteBuffer bb = mf.sliceByteBuffer();
            for (int p = 0; p + BatchConsumeQueue.CQ_STORE_UNIT_SIZE <= mf.getReadPosition();
                 p += BatchConsumeQueue.CQ_STORE_UNIT_SIZE) {
                long ts = bb.getLong(p + 20);
                units.add(new long[] {bb.getLong(p), bb.getInt(p + 8), bb.getLong(p + 12), ts, bb.getLong(p + 28),
                    bb.getShort(p + 36), bb.getInt(p + 38), bb.getInt(p + 42)});
                times.add(ts - 1);
                times.add(ts);
                times.add(ts + 1);
            }
        }
        q.put("files", files);
        q.put("units", units);
        List<Object> gets = new ArrayList<>();
        for (long n = Math.max(0, bcq.getMinOffsetInQueue()); n < bcq.getMaxOffsetInQueue(); n++) {
            gets.add(get(store, topic, qid, n));
        }
        q.put("get_message", gets);
        times.add(0L);
        if (!times.isEmpty()) {
            times.add(times.last() + 1000);
        }
        List<Object> tq = new ArrayList<>();
        for (long t : times) {
            tq.add(new long[] {t, store.getOffsetInQueueByTime(topic, qid, t)});
        }
        q.put("time_queries", tq);
        return q;
    }

    static Map<String, Object> get(DefaultMessageStore store, String topic, int qid, long n) {
        Map<String, Object> g = new LinkedHashMap<>();
        g.put("offset", n);
        GetMessageResult r = store.getMessage("oracle-bcq", topic, qid, n, 1, null);
        try {
            g.put("status", r.getStatus().toString());
            g.put("next_begin_offset", r.getNextBeginOffset());
            g.put("queue_offsets", new ArrayList<>(r.getMessageQueueOffset()));
            List<Long> phys = new ArrayList<>();
            Map<String, Object> inner = null;
            for (ByteBuffer b : r.getMessageBufferList()) {
                phys.add(b.getLong(b.position() + 28));
                MessageExt m = MessageDecoder.decode(b.slice(), true, false);
                if (m == null) {
                    continue;
                }
                List<MessageExt> unwrapped = new ArrayList<>();
                if (MessageSysFlag.check(m.getSysFlag(), MessageSysFlag.NEED_UNWRAP_FLAG)) {
                    try {
                        MessageDecoder.decodeMessage(m, unwrapped); // what the 5.x client does
                    } catch (Exception ex) {
                        g.put("unwrap_error", ex.toString());
                    }
                } else {
                    unwrapped.add(m);
                }
                for (MessageExt u : unwrapped) {
                    if (inner == null && u.getQueueOffset() == n) {
                        inner = new LinkedHashMap<>();
                        inner.put("queue_offset", u.getQueueOffset());
                        inner.put("flag", u.getFlag());
                        inner.put("body_b64", Base64.getEncoder().encodeToString(u.getBody()));
                        inner.put("properties", new TreeMap<>(u.getProperties()));
                    }
                }
            }
            g.put("phys_offsets", phys);
            g.put("inner", inner);
        } finally {
            r.release();
        }
        return g;
    }
}
