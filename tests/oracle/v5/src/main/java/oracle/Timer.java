package oracle;

import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.util.HookUtils;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.TopicFilterType;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.hook.PutMessageHook;
import org.apache.rocketmq.store.logfile.MappedFile;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;
import org.apache.rocketmq.store.timer.Slot;
import org.apache.rocketmq.store.timer.TimerCheckpoint;
import org.apache.rocketmq.store.timer.TimerLog;
import org.apache.rocketmq.store.timer.TimerMessageStore;
import org.apache.rocketmq.store.timer.TimerMetrics;
import org.apache.rocketmq.store.timer.TimerWheel;

import java.io.File;
import java.io.RandomAccessFile;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The 5.x timer store (TimerMessageStore) as the broker wires it (BrokerController.initializeMessageStore): timercheck
 * and timermetrics under config/, timerlog/ and timerwheel under the root, the put hook that moves timer messages to
 * rmq_sys_wheel_timer (HookUtils.handleScheduleMessage), the enqueue/dequeue/flush services.
 * Commands: timer-write, timer-read, timer-restart (called from Main by reflection; v5 only).
 */
public final class Timer {
    private Timer() {
    }

    public static Map<String, Object> run(Compat c, String cmd, Map<String, String> o) throws Exception {
        switch (cmd) {
            case "timer-write":
                return write(c, Main.need(o, "scenario"), Main.need(o, "store"));
            case "timer-read":
                return read(c, Main.need(o, "store"), o.get("conf"));
            case "timer-restart":
                return restart(c, Main.need(o, "store"), o.get("conf"));
            default:
                throw new Main.UsageException("unknown command " + cmd);
        }
    }

    static final class Wired {
        DefaultMessageStore store;
        TimerMessageStore tms;
        TimerCheckpoint tcp;
        BrokerController ctl;
    }

    static Wired wire(Compat c, MessageStoreConfig cfg, List<String> topics, boolean withHook) throws Exception {
        cfg.setTimerWheelEnable(true);
        Wired w = new Wired();
        w.store = c.newStore(cfg, topics);
        String root = cfg.getStorePathRootDir();
        String confDir = root + File.separator + "config" + File.separator;
        w.tcp = new TimerCheckpoint(confDir + "timercheck");
        TimerMetrics metrics = new TimerMetrics(confDir + "timermetrics");
        w.tms = new TimerMessageStore(w.store, cfg, w.tcp, metrics, null);
        w.store.setTimerMessageStore(w.tms);
        if (withHook) {
            BrokerConfig bc = new BrokerConfig();
            NettyServerConfig nsc = new NettyServerConfig();
            nsc.setListenPort(0);
            w.ctl = new BrokerController(bc, nsc, new NettyClientConfig(), cfg);
            w.ctl.setMessageStore(w.store);
            w.ctl.setTimerMessageStore(w.tms);
            final BrokerController ctl = w.ctl;
            // the broker's own put hook (BrokerController.registerMessageStoreHook, "handleScheduleMessage")
            w.store.getPutMessageHookList().add(new PutMessageHook() {
                @Override
                public String hookName() {
                    return "handleScheduleMessage";
                }

                @Override
                public PutMessageResult executeBeforePutMessage(MessageExt msg) {
                    if (msg instanceof MessageExtBrokerInner) {
                        return HookUtils.handleScheduleMessage(ctl, (MessageExtBrokerInner) msg);
                    }
                    return null;
                }
            });
        }
        return w;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> write(Compat c, String scenarioPath, String storeDir) throws Exception {
        Map<String, Object> scen = Json.parseObject(new String(Files.readAllBytes(new File(scenarioPath).toPath()),
            StandardCharsets.UTF_8));
        Map<String, Object> sc = (Map<String, Object>) scen.get("store_config");
        MessageStoreConfig cfg = StoreConf.build(sc, storeDir);
        List<String> topics = new ArrayList<>();
        for (Object b : (List<Object>) scen.get("batches")) {
            topics.add((String) ((Map<String, Object>) b).get("topic"));
        }
        Wired w = wire(c, cfg, topics, true);
        if (!w.store.load() || !w.tms.load()) {
            throw new IllegalStateException("load failed");
        }
        w.store.start();
        w.tms.start(false);
        // a master broker runs the dequeue side too (BrokerController.changeSpecialServiceStatus(true))
        w.tms.setShouldRunningDequeue(true);
        boolean crash = "crash".equals(scen.get("end"));
        long base = ((Number) scen.getOrDefault("deliver_base_s", 86400)).longValue() * 1000
            + System.currentTimeMillis() / 1000 * 1000;
        List<Map<String, Object>> puts = new ArrayList<>();
        int idx = 0;
        int bi = 0;
        for (Object bo : (List<Object>) scen.get("batches")) {
            Map<String, Object> b = (Map<String, Object>) bo;
            if (Boolean.TRUE.equals(b.get("freeze_flush"))) {
                // from here on the flush service (timerwheel, timercheck, timermetrics) no longer runs: what a kill
                // between two flush ticks leaves
                Thread.sleep(cfg.getTimerFlushIntervalMs() * 2L + 300);
                cfg.setTimerFlushIntervalMs(3600_000);
                Thread.sleep(1500);
            }
            int count = ((Number) b.get("count")).intValue();
            int perSlot = ((Number) b.getOrDefault("per_slot", 1)).intValue();
            long step = ((Number) b.getOrDefault("step_ms", 5000)).longValue();
            String how = (String) b.getOrDefault("property", "TIMER_DELIVER_MS");
            for (int i = 0; i < count; i++) {
                MessageExtBrokerInner m = new MessageExtBrokerInner();
                m.setTopic((String) b.get("topic"));
                m.setQueueId(i % 2);
                m.setBody(("timer " + bi + "/" + i + " " + "x".repeat(i % 7)).getBytes(StandardCharsets.UTF_8));
                m.setTags("T" + bi);
                m.setKeys("timer-" + bi + "-" + i);
                long deliver = base + (long) bi * 3_600_000L + (i / perSlot) * step;
                if ("TIMER_DELAY_SEC".equals(how)) {
                    MessageAccessor.putProperty(m, MessageConst.PROPERTY_TIMER_DELAY_SEC,
                        String.valueOf((deliver - System.currentTimeMillis()) / 1000));
                } else {
                    MessageAccessor.putProperty(m, MessageConst.PROPERTY_TIMER_DELIVER_MS, String.valueOf(deliver));
                }
                MessageClientIDSetter.setUniqID(m);
                long now = System.currentTimeMillis();
                m.setBornTimestamp(now);
                m.setBornHost(new InetSocketAddress("127.0.0.1", 50000 + i));
                m.setStoreHost(new InetSocketAddress("127.0.0.1", 10911));
                m.setPropertiesString(MessageDecoder.messageProperties2String(m.getProperties()));
                m.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(TopicFilterType.SINGLE_TAG, m.getTags()));
                PutMessageResult r = w.store.putMessage(m);
                Map<String, Object> p = new LinkedHashMap<>();
                p.put("index", idx++);
                p.put("status", r.getPutMessageStatus().toString());
                p.put("topic", m.getTopic());
                p.put("real_topic", b.get("topic"));
                p.put("uniq_key", MessageClientIDSetter.getUniqID(m));
                p.put("timer_out_ms", m.getProperty(MessageConst.PROPERTY_TIMER_OUT_MS));
                if (r.getAppendMessageResult() != null) {
                    p.put("wrote_offset", r.getAppendMessageResult().getWroteOffset());
                    p.put("wrote_bytes", r.getAppendMessageResult().getWroteBytes());
                    p.put("logics_offset", r.getAppendMessageResult().getLogicsOffset());
                }
                puts.add(p);
            }
            waitEnqueued(w);
            bi++;
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("rocketmq_version", c.version());
        out.put("store_config", StoreConf.normalized(sc));
        out.put("puts", puts);
        out.put("max_phy_offset", w.store.getMaxPhyOffset());
        out.put("timerlog_max_offset", w.tms.getTimerLog().getMappedFileQueue().getMaxOffset());
        out.put("end", crash ? "crash" : "shutdown");
        if (crash) {
            // no shutdown: Main ends this JVM with Runtime.halt (page cache keeps every mmap write; abort stays)
            w.store.getCommitLog().flush();
            out.put("abort_present", new File(storeDir, "abort").exists());
            return out;
        }
        Thread.sleep(cfg.getTimerFlushIntervalMs() * 2L + 300);
        w.tms.shutdown();
        w.store.shutdown();
        out.put("abort_present", new File(storeDir, "abort").exists());
        return out;
    }

    static void waitEnqueued(Wired w) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 30000;
        while (System.currentTimeMillis() < deadline) {
            if (w.store.dispatchBehindBytes() == 0) {
                ConsumeQueueInterface cq = w.store.getConsumeQueue(TimerMessageStore.TIMER_TOPIC, 0);
                long max = cq == null ? 0 : cq.getMaxOffsetInQueue();
                if (w.tms.getQueueOffset() >= max && w.tms.getCommitQueueOffset() >= max - 1) {
                    Thread.sleep(50);
                    return;
                }
            }
            Thread.sleep(5);
        }
        throw new IllegalStateException("timer enqueue did not catch up");
    }

    /** The broker's view: load (commitlog recovery) + TimerMessageStore.load() (its recover()), on a copy. */
    static Map<String, Object> read(Compat c, String storeDir, String conf) throws Exception {
        Map<String, Object> sc = StoreConf.forRead(storeDir, conf);
        Path tmp = Files.createTempDirectory("oracle-timer-read");
        try {
            Path copy = tmp.resolve("store");
            Files2.copyRecursive(new File(storeDir).toPath(), copy);
            return view(c, sc, copy.toString(), false);
        } finally {
            Files2.deleteRecursive(tmp);
        }
    }

    /** In place: load (commitlog recovery) + the timer store's load()/recover(), shutdown. */
    static Map<String, Object> restart(Compat c, String storeDir, String conf) throws Exception {
        Map<String, Object> sc = StoreConf.forRead(storeDir, conf);
        return view(c, sc, storeDir, true);
    }

    static Map<String, Object> view(Compat c, Map<String, Object> sc, String dir, boolean restart) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("rocketmq_version", c.version());
        out.put("recovery", new File(dir, "abort").exists() ? "abnormal" : "normal");
        File wheelFile = new File(dir, "timerwheel");
        out.put("wheel_on_disk", wheelFile.exists() ? rawSlots(wheelFile) : null);
        MessageStoreConfig cfg = StoreConf.build(sc, dir, false);
        Wired w = wire(c, cfg, Collections.emptyList(), false);
        boolean ok = w.store.load();
        out.put("load_ok", ok);
        if (!ok) {
            return out;
        }
        boolean tok = w.tms.load();
        out.put("timer_load_ok", tok);
        TimerLog tl = w.tms.getTimerLog();
        long end = tl.getMappedFileQueue().getFlushedWhere();
        out.put("process_offset", end);
        List<Map<String, Object>> files = new ArrayList<>();
        List<Map<String, Object>> units = new ArrayList<>();
        for (MappedFile mf : tl.getMappedFileQueue().getMappedFiles()) {
            Map<String, Object> f = new LinkedHashMap<>();
            f.put("name", new File(mf.getFileName()).getName());
            f.put("size", mf.getFileSize());
            files.add(f);
            byte[] raw = Files.readAllBytes(new File(mf.getFileName()).toPath());
            {
                ByteBuffer bf = ByteBuffer.wrap(raw);
                for (int pos = 0; pos + TimerLog.UNIT_SIZE <= mf.getFileSize(); pos += TimerLog.UNIT_SIZE) {
                    long at = mf.getFileFromOffset() + pos;
                    if (at >= end) {
                        break;
                    }
                    bf.position(pos);
                    int size = bf.getInt();
                    long prev = bf.getLong();
                    int magic = bf.getInt();
                    if (magic == TimerLog.BLANK_MAGIC_CODE) {
                        Map<String, Object> u = new LinkedHashMap<>();
                        u.put("pos", at);
                        u.put("blank", size);
                        units.add(u);
                        break;
                    }
                    Map<String, Object> u = new LinkedHashMap<>();
                    u.put("pos", at);
                    u.put("size", size);
                    u.put("prev_pos", prev);
                    u.put("magic", magic);
                    long cw = bf.getLong();
                    int dt = bf.getInt();
                    u.put("curr_write_ms", cw);
                    u.put("delayed_ms", dt);
                    u.put("deliver_ms", cw + dt);
                    u.put("offset_py", bf.getLong());
                    u.put("size_py", bf.getInt());
                    u.put("topic_hash", bf.getInt());
                    units.add(u);
                }
            }
        }
        out.put("timerlog_files", files);
        out.put("units", units);
        TimerWheel wheel = w.tms.getTimerWheel();
        List<Map<String, Object>> slots = new ArrayList<>();
        int prec = w.tms.getPrecisionMs();
        for (int i = 0; i < wheel.slotsTotal * 2; i++) {
            Slot s = wheel.getRawSlot((long) i * prec);
            if (s.timeMs == 0 && s.firstPos == 0 && s.lastPos == 0 && s.num == 0 && s.magic == 0) {
                continue;
            }
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("index", i);
            m.put("time_ms", s.timeMs);
            m.put("first_pos", s.firstPos);
            m.put("last_pos", s.lastPos);
            m.put("num", s.num);
            m.put("magic", s.magic);
            slots.add(m);
        }
        out.put("wheel", slots);
        TimerCheckpoint cp = w.tcp;
        Map<String, Object> ck = new LinkedHashMap<>();
        ck.put("last_read_time_ms", cp.getLastReadTimeMs());
        ck.put("last_timer_log_flush_pos", cp.getLastTimerLogFlushPos());
        ck.put("last_timer_queue_offset", cp.getLastTimerQueueOffset());
        ck.put("master_timer_queue_offset", cp.getMasterTimerQueueOffset());
        out.put("timercheck", ck);
        out.put("curr_queue_offset", w.tms.getQueueOffset());
        out.put("curr_read_time_ms", w.tms.getCurrReadTimeMs());
        ConsumeQueueInterface cq = w.store.getConsumeQueue(TimerMessageStore.TIMER_TOPIC, 0);
        out.put("timer_queue_max_offset", cq == null ? null : cq.getMaxOffsetInQueue());
        // pending: what the dequeue side would find, slot by slot from the read time, walking prev_pos
        List<Map<String, Object>> pending = new ArrayList<>();
        long from = w.tms.getCurrReadTimeMs();
        for (int i = 0; i < wheel.slotsTotal * 2; i++) {
            long t = from + (long) i * prec;
            Slot s = wheel.getSlot(t);
            if (s.timeMs == -1 || s.lastPos < 0) {
                continue;
            }
            long pos = s.lastPos;
            int guard = 0;
            while (pos >= 0 && guard++ < 100000) {
                SelectMappedBufferResult r = tl.getTimerMessage(pos);
                if (r == null) {
                    break;
                }
                try {
                    ByteBuffer bf = r.getByteBuffer();
                    bf.getInt();
                    long prev = bf.getLong();
                    int magic = bf.getInt();
                    long cw = bf.getLong();
                    int dt = bf.getInt();
                    long offsetPy = bf.getLong();
                    int sizePy = bf.getInt();
                    Map<String, Object> p = new LinkedHashMap<>();
                    p.put("pos", pos);
                    p.put("slot_ms", s.timeMs);
                    p.put("magic", magic);
                    p.put("deliver_ms", cw + dt);
                    p.put("offset_py", offsetPy);
                    p.put("size_py", sizePy);
                    MessageExt msg = sizePy > 0 ? w.store.lookMessageByOffset(offsetPy, sizePy) : null;
                    p.put("uniq_key", msg == null ? null : MessageClientIDSetter.getUniqID(msg));
                    p.put("real_topic", msg == null ? null : msg.getProperty(MessageConst.PROPERTY_REAL_TOPIC));
                    pending.add(p);
                    pos = prev;
                } finally {
                    r.release();
                }
            }
        }
        out.put("pending", pending);
        out.put("timermetrics", Json.parseObject(w.tms.getTimerMetrics().encode()));
        if (restart) {
            // the timer store is not started: its shutdown() writes timercheck and flushes the timerlog; the wheel
            // revisions of recover() stay in memory (TimerWheel.shutdown(false)), as on a broker stopped before the
            // flush service's first tick
            w.store.start();
            w.tms.shutdown();
            w.store.shutdown();
            out.put("abort_present", new File(dir, "abort").exists());
        }
        return out;
    }

    static List<Map<String, Object>> rawSlots(File f) throws Exception {
        List<Map<String, Object>> r = new ArrayList<>();
        try (RandomAccessFile raf = new RandomAccessFile(f, "r")) {
            byte[] all = new byte[(int) raf.length()];
            raf.readFully(all);
            ByteBuffer bb = ByteBuffer.wrap(all);
            for (int i = 0; i + 32 <= all.length; i += 32) {
                long t = bb.getLong(i);
                long first = bb.getLong(i + 8);
                long last = bb.getLong(i + 16);
                int num = bb.getInt(i + 24);
                int magic = bb.getInt(i + 28);
                if (t == 0 && first == 0 && last == 0 && num == 0 && magic == 0) {
                    continue;
                }
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("index", i / 32);
                m.put("time_ms", t * 1000);
                m.put("first_pos", first);
                m.put("last_pos", last);
                m.put("num", num);
                m.put("magic", magic);
                r.add(m);
            }
        }
        return r;
    }
}
