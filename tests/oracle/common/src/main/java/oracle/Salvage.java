package oracle;

import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/** `salvage`: what each consumer group has not consumed yet, as the broker itself serves it. On a copy of the store:
 * the config files are loaded by the broker's own managers (ConsumerOffsetManager, SubscriptionGroupManager, with
 * their .bak fallback), the store is loaded (normal or abnormal recovery) and started; then for every topic@group of
 * the offset table and every queue of that topic (the table's and the store's), DefaultMessageStore.getMessage(group,
 * topic, queue, offset, 32, null) is called from the committed offset (from the queue's min when the group has none
 * for that queue) following nextBeginOffset until the queue's max offset. A subscription group without an entry for
 * its retry topic gets that topic's queues from their min too. Prints one row per message (Reader.msgJson + group). */
final class Salvage {
    private Salvage() {
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> run(Compat c, String storeDir, String confPath, String onlyGroup) throws Throwable {
        Map<String, Object> sc = StoreConf.forRead(storeDir, confPath);
        Path tmp = Files.createTempDirectory("oracle-salvage");
        try {
            Path copy = tmp.resolve("store");
            Files2.copyRecursive(new File(storeDir).toPath(), copy);
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("rocketmq_version", c.version());
            Map<String, Object> cfgs = c.loadConfigs(copy.resolve("config").toString());
            Map<String, Object> offsets = table(cfgs, "consumerOffset.json", "offsetTable");
            Map<String, Object> groups = table(cfgs, "subscriptionGroup.json", "subscriptionGroupTable");
            MessageStoreConfig cfg = StoreConf.build(sc, copy.toString(), false);
            DefaultMessageStore store = c.newStore(cfg, Collections.emptyList());
            // getMessage records its disk-fall-behind statistics: give the store the broker's stats manager
            java.lang.reflect.Field sm = DefaultMessageStore.class.getDeclaredField("brokerStatsManager");
            sm.setAccessible(true);
            if (sm.get(store) == null) {
                sm.set(store, sm.getType().getConstructor(String.class, boolean.class).newInstance("oracle", false));
            }
            boolean ok = store.load();
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
            Map<String, List<Integer>> have = c.queueIds(store);
            // (group, topic) -> queue -> committed offset (null: none)
            TreeMap<String, TreeMap<String, TreeMap<Integer, Long>>> plan = new TreeMap<>();
            for (Map.Entry<String, Object> e : offsets.entrySet()) {
                int at = e.getKey().indexOf('@');
                String topic = e.getKey().substring(0, at);
                String group = e.getKey().substring(at + 1);
                TreeMap<Integer, Long> qs = plan.computeIfAbsent(group, k -> new TreeMap<>())
                    .computeIfAbsent(topic, k -> new TreeMap<>());
                for (Map.Entry<String, Object> q : ((Map<String, Object>) e.getValue()).entrySet()) {
                    qs.put(Integer.parseInt(q.getKey()), ((Number) q.getValue()).longValue());
                }
                for (Integer q : have.getOrDefault(topic, Collections.emptyList())) {
                    qs.putIfAbsent(q, null);
                }
            }
            for (String group : groups.keySet()) {
                String retry = "%RETRY%" + group;
                if (have.containsKey(retry)) {
                    TreeMap<Integer, Long> qs = plan.computeIfAbsent(group, k -> new TreeMap<>())
                        .computeIfAbsent(retry, k -> new TreeMap<>());
                    for (Integer q : have.get(retry)) {
                        qs.putIfAbsent(q, null);
                    }
                }
            }
            List<Map<String, Object>> rows = new ArrayList<>();
            List<Map<String, Object>> queues = new ArrayList<>();
            for (Map.Entry<String, TreeMap<String, TreeMap<Integer, Long>>> g : plan.entrySet()) {
                if (onlyGroup != null && !onlyGroup.equals(g.getKey())) {
                    continue;
                }
                for (Map.Entry<String, TreeMap<Integer, Long>> t : g.getValue().entrySet()) {
                    for (Map.Entry<Integer, Long> q : t.getValue().entrySet()) {
                        queues.add(pull(store, g.getKey(), t.getKey(), q.getKey(), q.getValue(), rows));
                    }
                }
            }
            out.put("queues", queues);
            out.put("rows", rows);
            store.shutdown();
            return out;
        } finally {
            Files2.deleteRecursive(tmp);
        }
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> table(Map<String, Object> cfgs, String file, String name) {
        Object f = cfgs.get(file);
        Object data = f instanceof Map ? ((Map<String, Object>) f).get("data") : null;
        Object t = data instanceof Map ? ((Map<String, Object>) data).get(name) : null;
        return t instanceof Map ? (Map<String, Object>) t : Collections.emptyMap();
    }

    private static Map<String, Object> pull(DefaultMessageStore store, String group, String topic, int queue,
        Long committed, List<Map<String, Object>> rows) throws Exception {
        long min = store.getMinOffsetInQueue(topic, queue);
        long max = store.getMaxOffsetInQueue(topic, queue);
        Map<String, Object> q = new LinkedHashMap<>();
        q.put("group", group);
        q.put("topic", topic);
        q.put("queue_id", queue);
        q.put("committed", committed);
        q.put("min_offset", min);
        q.put("max_offset", max);
        long offset = committed == null ? min : committed;
        List<String> statuses = new ArrayList<>();
        int n = 0;
        while (offset < max) {
            GetMessageResult r = store.getMessage(group, topic, queue, offset, 32, null);
            if (r == null) {
                statuses.add("null");
                break;
            }
            statuses.add(String.valueOf(r.getStatus()));
            try {
                for (ByteBuffer b : r.getMessageBufferList()) {
                    MessageExt m = MessageDecoder.decode(b.slice(), true, false);
                    Map<String, Object> row = Reader.msgJson(m);
                    row.put("group", group);
                    rows.add(row);
                    n++;
                }
            } finally {
                r.release();
            }
            long next = r.getNextBeginOffset();
            if (next <= offset) {
                break;
            }
            offset = next;
        }
        q.put("rows", n);
        q.put("statuses", new ArrayList<>(new TreeSet<>(statuses)));
        return q;
    }
}
