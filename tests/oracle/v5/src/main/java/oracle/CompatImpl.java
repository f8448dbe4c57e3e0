package oracle;

import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.ConfigManager;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.TopicFilterType;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBatch;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.store.ConsumeQueue;
import org.apache.rocketmq.store.ConsumeQueueExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;
import org.apache.rocketmq.store.queue.CqUnit;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;

/** RocketMQ 5.3.3. */
public class CompatImpl implements Compat {
    @Override
    public String version() {
        return "5.3.3";
    }

    @Override
    public DefaultMessageStore newStore(MessageStoreConfig cfg, List<String> topics) throws Exception {
        BrokerConfig bc = new BrokerConfig();
        bc.setLongPollingEnable(false);
        ConcurrentMap<String, TopicConfig> table = new ConcurrentHashMap<>();
        for (String t : topics) {
            TopicConfig tc = new TopicConfig(t, 8, 8);
            table.put(t, tc);
        }
        return new DefaultMessageStore(cfg, null, (topic, queueId, logicOffset, tagsCode, msgStoreTime, filterBitMap,
            properties) -> { }, bc, table);
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
        int tranType = MessageSysFlag.getTransactionValue(inner.getSysFlag());
        if ((tranType == MessageSysFlag.TRANSACTION_NOT_TYPE || tranType == MessageSysFlag.TRANSACTION_COMMIT_TYPE)
            && inner.getDelayTimeLevel() > 0) {
            // what the broker's put-message hook does in 5.x (HookUtils.transformDelayLevelMessage)
            int maxLevel = cfg.getMessageDelayLevel().split(" ").length;
            if (inner.getDelayTimeLevel() > maxLevel) {
                inner.setDelayTimeLevel(maxLevel);
            }
            MessageAccessor.putProperty(inner, MessageConst.PROPERTY_REAL_TOPIC, inner.getTopic());
            MessageAccessor.putProperty(inner, MessageConst.PROPERTY_REAL_QUEUE_ID, String.valueOf(inner.getQueueId()));
            inner.setPropertiesString(MessageDecoder.messageProperties2String(inner.getProperties()));
            inner.setTopic(TopicValidator.RMQ_SYS_SCHEDULE_TOPIC);
            inner.setQueueId(inner.getDelayTimeLevel() - 1);
        }
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
        b.setPropertiesString(MessageDecoder.messageProperties2String(b.getProperties()));
        return store.putMessages(b);
    }

    @Override
    public Map<String, List<Integer>> queueIds(DefaultMessageStore store) {
        Map<String, List<Integer>> r = new TreeMap<>();
        for (Map.Entry<String, ConcurrentMap<Integer, ConsumeQueueInterface>> e : store.getConsumeQueueTable().entrySet()) {
            List<Integer> ids = new ArrayList<>(e.getValue().keySet());
            Collections.sort(ids);
            r.put(e.getKey(), ids);
        }
        return r;
    }

    @Override
    public List<long[]> units(DefaultMessageStore store, String topic, int queueId, long min, long max) {
        List<long[]> r = new ArrayList<>();
        ConsumeQueueInterface cq = store.getConsumeQueue(topic, queueId);
        if (cq == null) {
            return r;
        }
        for (long i = min; i < max; i++) {
            CqUnit u = cq.get(i);
            if (u == null) {
                r.add(new long[] {i, -1, -1, 0});
                continue;
            }
            long tags = u.getTagsCode();
            if (u.getCqExtUnit() != null && cq instanceof ConsumeQueue) {
                // get() replaced the stored ext address by the ext unit's tagsCode: report the stored value
                SelectMappedBufferResult sb = ((ConsumeQueue) cq).getIndexBuffer(i);
                if (sb != null) {
                    try {
                        tags = sb.getByteBuffer().getLong(sb.getByteBuffer().position() + 12);
                    } finally {
                        sb.release();
                    }
                }
            }
            r.add(new long[] {u.getQueueOffset(), u.getPos(), u.getSize(), tags});
        }
        return r;
    }

    @Override
    public Map<String, Object> ext(DefaultMessageStore store, String topic, int queueId, long extAddr) {
        ConsumeQueue cq = (ConsumeQueue) store.findConsumeQueue(topic, queueId);
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
    public long maxOffsetInQueue(DefaultMessageStore store, String topic, int queueId) throws Exception {
        return store.getMaxOffsetInQueue(topic, queueId);
    }

    @Override
    public Long confirmOffset(DefaultMessageStore store) {
        return store.getStoreCheckpoint().getConfirmPhyOffset();
    }

    @Override
    public Map<String, Object> loadConfigs(String configDir) throws Throwable {
        Path tmp = Files.createTempDirectory("oracle-config");
        try {
            Path root = tmp.resolve("store");
            Files2.copyRecursive(new File(configDir).toPath(), root.resolve("config"));
            MessageStoreConfig msc = new MessageStoreConfig();
            msc.setHaListenPort(0);
            msc.setStorePathRootDir(root.toString());
            msc.setStorePathCommitLog(root.resolve("commitlog").toString());
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
            // ScheduleMessageService finds its file through the message store: give the controller an unloaded one.
            ctl.setMessageStore(newStore(msc, Collections.emptyList()));
            // ScheduleMessageService.load() = ConfigManager.load() + parseDelayLevel() + correctDelayOffset(); the
            // last step needs a loaded message store, so use the broker's own variant without it.
            out.put("delayOffset.json", one(ctl.getScheduleMessageService(),
                ctl.getScheduleMessageService().loadWhenSyncDelayOffset()));
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
