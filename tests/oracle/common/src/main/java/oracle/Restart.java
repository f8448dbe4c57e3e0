package oracle;

import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.io.File;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/** restart: the broker's own start (load = normal/abnormal recovery, start, dispatch) and clean shutdown, IN PLACE. */
final class Restart {
    private Restart() {
    }

    static Map<String, Object> run(Compat c, String storeDir, String conf) throws Exception {
        Map<String, Object> sc = StoreConf.forRead(storeDir, conf);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("rocketmq_version", c.version());
        out.put("recovery", new File(storeDir, "abort").exists() ? "abnormal" : "normal");
        MessageStoreConfig cfg = StoreConf.build(sc, storeDir, false);
        DefaultMessageStore store = c.newStore(cfg, Collections.emptyList());
        Hooks.call("oracle.BatchCq", "prepareRead", store, storeDir);
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
        Thread.sleep(50);
        out.put("max_offset", store.getMaxPhyOffset());
        store.shutdown();
        out.put("abort_present", new File(storeDir, "abort").exists());
        return out;
    }
}
