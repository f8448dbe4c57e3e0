package oracle;

import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.util.List;
import java.util.Map;

/** The version-specific bits (4.9.7 vs 5.3.3); everything else is shared. */
public interface Compat {
    /** e.g. "5.3.3". */
    String version();

    DefaultMessageStore newStore(MessageStoreConfig cfg, List<String> topics) throws Exception;

    /** A new MessageExtBrokerInner (its package differs between versions). */
    MessageExt newInner();

    /** Broker-side finishing of a single message (tagsCode, propertiesString, delay transform in 5.x) and put. */
    PutMessageResult put(DefaultMessageStore store, MessageExt inner, MessageStoreConfig cfg);

    /** Build a MessageExtBatch from the given fields and put it with putMessages. */
    PutMessageResult putBatch(DefaultMessageStore store, MessageExt batchTemplate, byte[] encodedBody);

    /** [topic -> sorted queue ids] of the store's consume queue table. */
    Map<String, List<Integer>> queueIds(DefaultMessageStore store);

    /** Units [queueOffset, physicalOffset, size, tagsCode] of [min, max). */
    List<long[]> units(DefaultMessageStore store, String topic, int queueId, long min, long max);

    /** The ext unit at a CQ unit's ext address as the queue reads it: {tags_code, msg_store_time, bit_map_b64}, or null. */
    Map<String, Object> ext(DefaultMessageStore store, String topic, int queueId, long extAddr);

    long maxOffsetInQueue(DefaultMessageStore store, String topic, int queueId) throws Exception;

    /** Raw confirm offset after recovery (5.x: checkpoint confirmPhyOffset), or null if the version has none. */
    Long confirmOffset(DefaultMessageStore store);

    /** Load the config json files via the broker's managers. */
    Map<String, Object> loadConfigs(String configDir) throws Throwable;
}
