package oracle;

import org.apache.rocketmq.broker.filter.CommitLogDispatcherCalcBitMap;
import org.apache.rocketmq.broker.filter.ConsumerFilterManager;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;
import java.util.Map;

/**
 * SQL92 filter bit maps for the consume-queue ext (enableConsumeQueueExt): the broker's own
 * CommitLogDispatcherCalcBitMap over a ConsumerFilterManager holding the scenario's "sql92_filters"
 * ([{"topic","group","expression"}]), put first in the dispatcher list as BrokerController does.
 */
final class Filters {
    private Filters() {
    }

    /** Null when the scenario has no filters. Sets bitMapLengthConsumeQueueExt like ConsumerFilterManager(broker). */
    @SuppressWarnings("unchecked")
    static ConsumerFilterManager create(Object filters, MessageStoreConfig cfg) {
        if (!(filters instanceof List) || ((List<Object>) filters).isEmpty()) {
            return null;
        }
        ConsumerFilterManager m = new ConsumerFilterManager(); // bloom filter (20, 64), as its test constructor
        for (Object o : (List<Object>) filters) {
            Map<String, Object> f = (Map<String, Object>) o;
            if (!m.register(String.valueOf(f.get("topic")), String.valueOf(f.get("group")),
                String.valueOf(f.get("expression")), "SQL92", 0L)) {
                throw new IllegalArgumentException("filter not registered: " + f);
            }
        }
        cfg.setBitMapLengthConsumeQueueExt(m.getBloomFilter().getM());
        return m;
    }

    static void install(DefaultMessageStore store, ConsumerFilterManager m) {
        if (m == null) {
            return;
        }
        BrokerConfig bc = new BrokerConfig();
        bc.setEnableCalcFilterBitMap(true);
        store.getDispatcherList().addFirst(new CommitLogDispatcherCalcBitMap(bc, m));
    }

    /** "sql92_filters" of a scenario / manifest ("scenario" inside) file, or of DIR/../manifest.json. */
    @SuppressWarnings("unchecked")
    static Object forRead(String storeDir, String confPath) throws Exception {
        Path p = confPath != null ? Paths.get(confPath)
            : Paths.get(storeDir).toAbsolutePath().getParent().resolve("manifest.json");
        if (!Files.exists(p)) {
            return null;
        }
        Map<String, Object> j = Json.parseObject(new String(Files.readAllBytes(p), StandardCharsets.UTF_8));
        if (j.get("scenario") instanceof Map) {
            j = (Map<String, Object>) j.get("scenario");
        }
        return j.get("sql92_filters");
    }
}
