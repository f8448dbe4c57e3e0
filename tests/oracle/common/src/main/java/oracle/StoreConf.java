package oracle;

import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;

import java.io.File;
import java.io.RandomAccessFile;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.LinkedHashMap;
import java.util.Map;

/** Builds a MessageStoreConfig from the scenario/manifest "store_config" map. */
final class StoreConf {
    private StoreConf() {
    }

    static final String DEFAULT_DELAY = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

    /** The keys recorded in a manifest's store_config, with the broker defaults. */
    static Map<String, Object> normalized(Map<String, Object> sc) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("mappedFileSizeCommitLog", num(sc, "mappedFileSizeCommitLog", 1024L * 1024 * 1024));
        r.put("mappedFileSizeConsumeQueue", num(sc, "mappedFileSizeConsumeQueue", 300000L * 20));
        r.put("maxHashSlotNum", num(sc, "maxHashSlotNum", 5000000L));
        r.put("maxIndexNum", num(sc, "maxIndexNum", 5000000L * 4));
        r.put("messageDelayLevel", sc.getOrDefault("messageDelayLevel", DEFAULT_DELAY));
        r.put("enabledAppendPropCRC", Boolean.TRUE.equals(sc.get("enabledAppendPropCRC")));
        r.put("flushDiskType", sc.getOrDefault("flushDiskType", "ASYNC_FLUSH"));
        for (Map.Entry<String, Object> e : sc.entrySet()) {
            r.putIfAbsent(e.getKey(), e.getValue());
        }
        return r;
    }

    static long num(Map<String, Object> m, String k, long def) {
        Object v = m.get(k);
        return v == null ? def : ((Number) v).longValue();
    }

    static MessageStoreConfig build(Map<String, Object> sc0, String root) throws Exception {
        return build(sc0, root, true);
    }

    /** strict=false (read/bench-recover): options this version does not know are ignored with a warning. */
    static MessageStoreConfig build(Map<String, Object> sc0, String root, boolean strict) throws Exception {
        Map<String, Object> sc = normalized(sc0);
        MessageStoreConfig cfg = new MessageStoreConfig();
        String abs = new File(root).getAbsolutePath();
        cfg.setStorePathRootDir(abs);
        cfg.setStorePathCommitLog(abs + File.separator + "commitlog");
        // never let the oracle's own store be cleaned or listen on a fixed port
        cfg.setHaListenPort(0);
        cfg.setFileReservedTime(24 * 365 * 100);
        cfg.setDiskMaxUsedSpaceRatio(95);
        cfg.setDeleteWhen("99");
        for (Map.Entry<String, Object> e : sc.entrySet()) {
            String k = e.getKey();
            Object v = e.getValue();
            if (k.equals("flushDiskType")) {
                cfg.setFlushDiskType(FlushDiskType.valueOf(String.valueOf(v)));
                continue;
            }
            Method setter = findSetter(k);
            if (setter == null) {
                if (Boolean.FALSE.equals(v)) {
                    continue; // e.g. enabledAppendPropCRC=false on 4.9: the option does not exist there, same meaning
                }
                if (!strict) {
                    System.err.println("warning: store option not supported by this RocketMQ version, ignored: " + k);
                    continue;
                }
                throw new IllegalArgumentException("store option not supported by this RocketMQ version: " + k + "=" + v);
            }
            Class<?> t = setter.getParameterTypes()[0];
            Object arg;
            if (t == int.class || t == Integer.class) {
                arg = ((Number) v).intValue();
            } else if (t == long.class || t == Long.class) {
                arg = ((Number) v).longValue();
            } else if (t == boolean.class || t == Boolean.class) {
                arg = v instanceof Boolean ? v : Boolean.parseBoolean(String.valueOf(v));
            } else if (t == double.class) {
                arg = ((Number) v).doubleValue();
            } else if (t == String.class) {
                arg = String.valueOf(v);
            } else if (t.isEnum()) {
                @SuppressWarnings({"unchecked", "rawtypes"})
                Object ev = Enum.valueOf((Class) t, String.valueOf(v));
                arg = ev;
            } else {
                throw new IllegalArgumentException("cannot set store option " + k);
            }
            setter.invoke(cfg, arg);
        }
        DLedger.pickPort(cfg);
        return cfg;
    }

    static Method findSetter(String key) {
        String name = "set" + Character.toUpperCase(key.charAt(0)) + key.substring(1);
        String asIs = "set" + key; // the DLedger options: setdLegerGroup, setdLegerPeers, setdLegerSelfId
        for (Method m : MessageStoreConfig.class.getMethods()) {
            if ((m.getName().equals(name) || m.getName().equals(asIs)) && m.getParameterCount() == 1) {
                return m;
            }
        }
        return null;
    }

    /**
     * store config for reading DIR: --conf file (scenario / manifest with "store_config", or a flat map), else
     * DIR/../manifest.json, else inferred from the file sizes (index: assumes maxIndexNum = 4 * maxHashSlotNum).
     */
    @SuppressWarnings("unchecked")
    static Map<String, Object> forRead(String storeDir, String confPath) throws Exception {
        Path conf = null;
        if (confPath != null) {
            conf = Paths.get(confPath);
        } else {
            Path m = Paths.get(storeDir).toAbsolutePath().getParent().resolve("manifest.json");
            if (Files.exists(m)) {
                conf = m;
            }
        }
        if (conf != null) {
            Map<String, Object> j = Json.parseObject(new String(Files.readAllBytes(conf), StandardCharsets.UTF_8));
            if (j.get("store_config") instanceof Map) {
                return new LinkedHashMap<>((Map<String, Object>) j.get("store_config"));
            }
            return new LinkedHashMap<>(j);
        }
        return infer(storeDir);
    }

    static Map<String, Object> infer(String storeDir) throws Exception {
        Map<String, Object> r = new LinkedHashMap<>();
        File[] cl = new File(storeDir, "commitlog").listFiles();
        if (cl != null) {
            for (File f : cl) {
                if (f.length() > 0) {
                    r.put("mappedFileSizeCommitLog", f.length());
                    break;
                }
            }
        }
        File cq = new File(storeDir, "consumequeue");
        long cqSize = firstFileSize(cq, 3);
        if (cqSize > 0) {
            r.put("mappedFileSizeConsumeQueue", cqSize);
        }
        File[] idx = new File(storeDir, "index").listFiles();
        if (idx != null && idx.length > 0) {
            long sz = idx[0].length();
            if (sz > 40 && (sz - 40) % 84 == 0) {
                long s = (sz - 40) / 84;
                r.put("maxHashSlotNum", s);
                r.put("maxIndexNum", 4 * s);
            }
        }
        return r;
    }

    private static long firstFileSize(File dir, int depth) {
        File[] fs = dir.listFiles();
        if (fs == null) {
            return -1;
        }
        for (File f : fs) {
            if (depth == 1 && f.isFile() && f.length() > 0) {
                return f.length();
            }
            if (depth > 1 && f.isDirectory()) {
                long s = firstFileSize(f, depth - 1);
                if (s > 0) {
                    return s;
                }
            }
        }
        return -1;
    }

    static byte[] readHead(File f, int n) throws Exception {
        try (RandomAccessFile raf = new RandomAccessFile(f, "r")) {
            byte[] b = new byte[(int) Math.min(n, raf.length())];
            raf.readFully(b);
            return b;
        }
    }
}
