package oracle;

import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.io.File;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

/** `expire`: the broker's own file expiry, in place (the store is disposable): load, start, then one pass of
 * CleanCommitLogService.deleteExpiredFiles (as after `executeDeleteFilesManually`, fileReservedTime = --hours,
 * by file mtime) and CleanConsumeQueueService.deleteExpiredFiles (consume queues + index), then shutdown.
 * Prints the files left. The private services are reached by reflection: same code path as the scheduler. */
final class Expire {
    private Expire() {
    }

    static Map<String, Object> run(Compat c, String storeDir, String confPath, int hours) throws Exception {
        Map<String, Object> sc = StoreConf.forRead(storeDir, confPath);
        MessageStoreConfig cfg = StoreConf.build(sc, storeDir, false);
        cfg.setFileReservedTime(hours);
        DefaultMessageStore store = c.newStore(cfg, Collections.emptyList());
        Hooks.call("oracle.BatchCq", "prepareRead", store, storeDir); // BatchCQ topics expire with their queues
        Map<String, Object> out = new LinkedHashMap<>();
        if (!store.load()) {
            out.put("load_ok", false);
            return out;
        }
        store.start();
        store.executeDeleteFilesManually();
        invoke(store, "cleanCommitLogService");
        invoke(store, "cleanConsumeQueueService");
        out.put("load_ok", true);
        out.put("min_offset", store.getMinPhyOffset());
        store.shutdown();
        out.put("files", list(new File(storeDir)));
        return out;
    }

    private static void invoke(DefaultMessageStore store, String field) throws Exception {
        Field f = DefaultMessageStore.class.getDeclaredField(field);
        f.setAccessible(true);
        Object svc = f.get(store);
        Method m = svc.getClass().getDeclaredMethod("deleteExpiredFiles");
        m.setAccessible(true);
        m.invoke(svc);
    }

    private static List<String> list(File root) {
        TreeSet<String> out = new TreeSet<>();
        for (String sub : new String[] {"commitlog", "consumequeue", "batchconsumequeue", "index"}) {
            walk(root, new File(root, sub), out);
        }
        return new ArrayList<>(out);
    }

    private static void walk(File root, File f, TreeSet<String> out) {
        File[] kids = f.listFiles();
        if (kids == null) {
            if (f.isFile()) {
                out.add(root.toPath().relativize(f.toPath()).toString());
            }
            return;
        }
        for (File k : kids) {
            walk(root, k, out);
        }
    }
}
