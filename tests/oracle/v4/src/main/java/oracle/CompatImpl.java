package oracle;

import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.ConfigManager;
import org.apache.rocketmq.common.TopicFilterType;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBatch;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.store.ConsumeQueue;
import org.apache.rocketmq.store.ConsumeQueueExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.schedule.ScheduleMessageService;

import java.io.File;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentMap;

/** RocketMQ 4.9.7 (the newest 4.9 store/broker on Maven Central). */
public class CompatImpl implements Compat {
    @Override
    public String version() {
        return "4.9.7";
    }

    @Override
    public DefaultMessageStore newStore(MessageStoreConfig cfg, List<String> topics) throws Exception {
        BrokerConfig bc = new BrokerConfig();
        bc.setLongPollingEnable(false);
        return new DefaultMessageStore(cfg, null, (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap,
            properties) -> { }, bc);
    }

    @Override
    public MessageExt newInner() {
        return new MessageExtBrokerInner();
    }

    @Override
    public PutMessageResult put(DefaultMessageStore store, MessageExt m, MessageStoreConfig cfg) {
        MessageExtBrokerInner inner = (MessageExtBrokerInner) m;
        inner.setPropertiesString(MessageDecoder.messageProperties2String(inner.getProperties()));
        inner.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(TopicFilterType.SINGLE_TAG, inner.getTags()));
        // 4.9: CommitLog.asyncPutMessage itself rewrites delay-level messages to SCHEDULE_TOPIC_XXXX
        return store.putMessage(inner);
    }

    @Override
    public PutMessageResult putBatch(DefaultMessageStore store, MessageExt t, byte[] encodedBody) {
        MessageExtBatch b = new MessageExtBatch();
        b.setTopic(t.getTopic());
        b.setQueueId(t.getQueueId());
        b.setSysFlag(t.getSysFlag());
        b.setFlag(t.getFlag());
        MessageAccessor.setProperties(b, t.getProperties());
        b.setBody(encodedBody);
        b.setBornTimestamp(t.getBornTimestamp());
        b.setBornHost(t.getBornHost());
        b.setStoreHost(t.getStoreHost());
        b.setReconsumeTimes(t.getReconsumeTimes());
        return store.putMessages(b);
    }

    @Override
    public Map<String, List<Integer>> queueIds(DefaultMessageStore store) {
        Map<String, List<Integer>> r = new TreeMap<>();
        for (Map.Entry<String, ConcurrentMap<Integer, ConsumeQueue>> e : store.getConsumeQueueTable().entrySet()) {
            List<Integer> ids = new ArrayList<>(e.getValue().keySet());
            Collections.sort(ids);
            r.put(e.getKey(), ids);
        }
        return r;
    }

    @Override
    public List<long[]> units(DefaultMessageStore store, String topic, int queueId, long min, long max) {
        List<long[]> r = new ArrayList<>();
        ConsumeQueue cq = store.getConsumeQueue(topic, queueId);
        if (cq == null) {
            return r;
        }
        for (long i = min; i < max; i++) {
            SelectMappedBufferResult sb = cq.getIndexBuffer(i);
            if (sb == null) {
                r.add(new long[] {i, -1, -1, 0});
                continue;
            }
            try {
                ByteBuffer b = sb.getByteBuffer();
                int p = b.position();
                r.add(new long[] {i, b.getLong(p), b.getInt(p + 8), b.getLong(p + 12)});
            } finally {
                sb.release();
            }
        }
        return r;
    }

    @Override
    public Map<String, Object> ext(DefaultMessageStore store, String topic, int queueId, long extAddr) {
        ConsumeQueue cq = store.findConsumeQueue(topic, queueId);
        ConsumeQueueExt.CqExtUnit u = cq == null ? null : cq.getExt(extAddr);
        if (u == null) {
            return null;
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("tags_code", u.getTagsCode());
        r.put("msg_store_time", u.getMsgStoreTime());
        byte[] bm = u.getFilterBitMap();
        r.put("bit_map_b64", java.util.Base64.getEncoder().encodeToString(bm == null ? new byte[0] : bm));
        return r;
    }

    @Override
    public long maxOffsetInQueue(DefaultMessageStore store, String topic, int queueId) {
        return store.getMaxOffsetInQueue(topic, queueId);
    }

    @Override
    public Long confirmOffset(DefaultMessageStore store) {
        return null; // 4.9 has no confirm offset outside DLedger mode
    }

    @Override
    public Map<String, Object> loadConfigs(String configDir) throws Throwable {
        Path tmp = Files.createTempDirectory("oracle-config");
        try {
            Path root = tmp.resolve("store");
            Files2.copyRecursive(new File(configDir).toPath(), root.resolve("config"));
            MessageStoreConfig msc = new MessageStoreConfig();
            msc.setStorePathRootDir(root.toString());
            msc.setStorePathCommitLog(root.resolve("commitlog").toString());
            msc.setHaListenPort(0);
            BrokerConfig bc = new BrokerConfig();
            NettyServerConfig nsc = new NettyServerConfig();
            nsc.setListenPort(0);
            BrokerController ctl = new BrokerController(bc, nsc, new NettyClientConfig(), msc);
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("rocketmq_version", version());
            out.put("topics.json", one(ctl.getTopicConfigManager(), ctl.getTopicConfigManager().load()));
            out.put("subscriptionGroup.json",
                one(ctl.getSubscriptionGroupManager(), ctl.getSubscriptionGroupManager().load()));
            out.put("consumerOffset.json", one(ctl.getConsumerOffsetManager(), ctl.getConsumerOffsetManager().load()));
            // 4.9: delay offsets belong to the store's ScheduleMessageService. Its load() = ConfigManager.load() +
            // parseDelayLevel() + correctDelayOffset(); the last step needs a loaded message store, so run the
            // first two (the real ConfigManager.load(), invoked non-virtually).
            DefaultMessageStore store = newStore(msc, Collections.emptyList());
            ScheduleMessageService sms = store.getScheduleMessageService();
            MethodHandle superLoad = MethodHandles.privateLookupIn(ScheduleMessageService.class, MethodHandles.lookup())
                .findSpecial(ConfigManager.class, "load", MethodType.methodType(boolean.class), ScheduleMessageService.class);
            boolean ok = (boolean) superLoad.invoke(sms);
            ok = ok && sms.parseDelayLevel();
            out.put("delayOffset.json", one(sms, ok));
            out.put("consumerFilter.json", one(ctl.getConsumerFilterManager(), ctl.getConsumerFilterManager().load()));
            return out;
        } finally {
            Files2.deleteRecursive(tmp);
        }
    }

    static Map<String, Object> one(ConfigManager m, boolean ok) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("load_ok", ok);
        r.put("path", new File(m.configFilePath()).getName());
        String enc = m.encode(false);
        r.put("data", enc == null ? null : Json.parseObject(enc));
        return r;
    }
}
