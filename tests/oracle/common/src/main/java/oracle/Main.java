package oracle;

import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

/**
 * Entry point. stdout carries ONLY the JSON result: System.out is redirected to stderr before any RocketMQ class
 * is touched, and the result is printed on the saved real stdout.
 */
public final class Main {
    static PrintStream realOut;

    private Main() {
    }

    public static void main(String[] args) {
        realOut = new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
        System.setOut(System.err);
        System.setProperty("rocketmq.client.logUseSlf4j", "true");
        if (System.getenv("ORACLE_LOG") != null && !System.getenv("ORACLE_LOG").isEmpty()) {
            // broker logs (INFO) to stderr, e.g. to see why load() failed
            System.setProperty("rmq.logback.configurationFile", "oracle-debug-rmq.logback.xml");
            System.setProperty("logback.configurationFile", "oracle-debug-logback.xml");
        } else {
            System.setProperty("rmq.logback.configurationFile", "rmq.logback-test.xml");
        }
        int rc;
        try {
            rc = run(args);
        } catch (UsageException e) {
            System.err.println("usage error: " + e.getMessage());
            System.err.println(USAGE);
            rc = 2;
        } catch (Throwable t) {
            System.err.println("error: " + t);
            t.printStackTrace(System.err);
            rc = 1;
        }
        realOut.flush();
        System.err.flush();
        // RocketMQ leaves non-daemon threads behind: exit explicitly.
        Runtime.getRuntime().halt(rc);
    }

    static final String USAGE = String.join("\n",
        "usage: oracle <command> [options]",
        "  write --scenario FILE.json --store DIR",
        "  read --store DIR [--conf FILE.json]",
        "  config --dir CONFIG_DIR",
        "  bench-write --store DIR --count N --size B [--file-size BYTES]",
        "  bench-recover --store DIR [--abnormal] [--conf FILE.json]",
        "  restart --store DIR [--conf FILE.json]      (in place: load/recover, start, dispatch, shutdown)",
        "  expire --store DIR [--conf FILE.json] [--hours H]   (in place: the broker's own file expiry)",
        "  decode --records FILE.json   ({\"records\": [base64 record...]}: MessageDecoder, decompressing)",
        "  hold-lock --store DIR",
        "  compaction-write --scenario F --store DIR | compaction-read|compaction-restart --store DIR [--conf F]  (5.x)",
        "  salvage --store DIR [--conf FILE.json] [--group G]   (getMessage from each group's committed offsets)",
        "  rocksdb-write --scenario F --store DIR | rocksdb-read|rocksdb-restart --store DIR [--conf F]  (5.x, defaultRocksDB)",
        "  timer-write --scenario F --store DIR | timer-read --store DIR [--conf F] | timer-restart --store DIR (v5)",
        "  version");

    static class UsageException extends RuntimeException {
        UsageException(String m) {
            super(m);
        }
    }

    static Map<String, String> opts(String[] args, int from, String... flags) {
        Map<String, String> m = new HashMap<>();
        for (int i = from; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--")) {
                throw new UsageException("unexpected argument " + a);
            }
            String k = a.substring(2);
            if (Arrays.asList(flags).contains(k)) {
                m.put(k, "true");
            } else {
                if (i + 1 >= args.length) {
                    throw new UsageException("missing value for " + a);
                }
                m.put(k, args[++i]);
            }
        }
        return m;
    }

    static String need(Map<String, String> o, String k) {
        String v = o.get(k);
        if (v == null) {
            throw new UsageException("--" + k + " is required");
        }
        return v;
    }

    public static Compat compat() throws Exception {
        return (Compat) Class.forName("oracle.CompatImpl").getDeclaredConstructor().newInstance();
    }

    static void emit(Object result) {
        realOut.print(Json.write(result));
        realOut.flush();
    }

    static int run(String[] args) throws Throwable {
        if (args.length == 0) {
            throw new UsageException("no command");
        }
        String cmd = args[0];
        Compat c = compat();
        switch (cmd) {
            case "version": {
                Map<String, Object> r = new java.util.LinkedHashMap<>();
                r.put("rocketmq_version", c.version());
                emit(r);
                return 0;
            }
            case "write": {
                Map<String, String> o = opts(args, 1);
                emit(Writer.write(c, need(o, "scenario"), need(o, "store")));
                return 0;
            }
            case "write-child": {
                // internal: the crash half of `write` (this JVM ends with Runtime.halt, no shutdown)
                Map<String, String> o = opts(args, 1);
                Writer.writeChild(c, need(o, "scenario"), need(o, "store"), need(o, "snapshot"), need(o, "result"));
                return 0;
            }
            case "read": {
                Map<String, String> o = opts(args, 1);
                Map<String, Object> r = Reader.read(c, need(o, "store"), o.get("conf"));
                emit(r);
                return Boolean.TRUE.equals(r.get("load_ok")) ? 0 : 3;
            }
            case "config": {
                Map<String, String> o = opts(args, 1);
                emit(c.loadConfigs(need(o, "dir")));
                return 0;
            }
            case "bench-write": {
                Map<String, String> o = opts(args, 1);
                emit(Bench.write(c, need(o, "store"), Long.parseLong(need(o, "count")), Integer.parseInt(need(o, "size")),
                    Integer.parseInt(o.getOrDefault("file-size", "1073741824"))));
                return 0;
            }
            case "bench-recover": {
                Map<String, String> o = opts(args, 1, "abnormal");
                emit(Bench.recover(c, need(o, "store"), o.containsKey("abnormal"), o.get("conf")));
                return 0;
            }
            case "restart": {
                Map<String, String> o = opts(args, 1);
                Map<String, Object> r = Restart.run(c, need(o, "store"), o.get("conf"));
                emit(r);
                return Boolean.TRUE.equals(r.get("load_ok")) ? 0 : 3;
            }
            case "expire": {
                Map<String, String> o = opts(args, 1);
                emit(Expire.run(c, need(o, "store"), o.get("conf"), Integer.parseInt(o.getOrDefault("hours", "72"))));
                return 0;
            }
            case "salvage": {
                Map<String, String> o = opts(args, 1);
                emit(Salvage.run(c, need(o, "store"), o.get("conf"), o.get("group")));
                return 0;
            }
            case "decode": {
                emit(Codecs.decode(need(opts(args, 1), "records")));
                return 0;
            }
            case "hold-lock": {
                Map<String, String> o = opts(args, 1);
                return HoldLock.run(need(o, "store"));
            }
            case "compaction-write":
            case "compaction-read":
            case "compaction-restart": {
                // 5.x only (oracle/Compaction.java lives in the v5 module): write/read stores with compaction topics
                Map<String, String> o = opts(args, 1);
                Class<?> k;
                try {
                    k = Class.forName("oracle.Compaction");
                } catch (ClassNotFoundException e) {
                    throw new UsageException(cmd + ": RocketMQ " + c.version() + " has no compaction store");
                }
                String m = cmd.substring("compaction-".length());
                java.lang.reflect.Method fn = k.getDeclaredMethod(m, Compat.class, String.class, String.class);
                fn.setAccessible(true);
                @SuppressWarnings("unchecked")
                Map<String, Object> r = (Map<String, Object>) fn.invoke(null, c,
                    m.equals("write") ? need(o, "scenario") : need(o, "store"),
                    m.equals("write") ? need(o, "store") : o.get("conf"));
                emit(r);
                return Boolean.FALSE.equals(r.get("load_ok")) ? 3 : 0;
            }
            case "timer-write":
            case "timer-read":
            case "timer-restart": {
                // the 5.x timer store (Timer.java, v5 module only)
                Class<?> t;
                try {
                    t = Class.forName("oracle.Timer");
                } catch (ClassNotFoundException e) {
                    throw new UsageException(cmd + ": RocketMQ " + c.version() + " has no timer store");
                }
                emit(t.getMethod("run", Compat.class, String.class, Map.class).invoke(null, c, cmd, opts(args, 1)));
                return 0;
            }
            case "rocksdb-write":
            case "rocksdb-read":
            case "rocksdb-restart": {
                // storeType=defaultRocksDB (RocksStore.java, v5 module only)
                Class<?> r;
                try {
                    r = Class.forName("oracle.RocksStore");
                } catch (ClassNotFoundException e) {
                    throw new UsageException(cmd + ": RocketMQ " + c.version() + " has no RocksDB store");
                }
                java.lang.reflect.Method fn = r.getDeclaredMethod("run", Compat.class, String.class, Map.class);
                fn.setAccessible(true);
                emit(fn.invoke(null, c, cmd, opts(args, 1)));
                return 0;
            }
            default:
                throw new UsageException("unknown command " + cmd);
        }
    }
}
