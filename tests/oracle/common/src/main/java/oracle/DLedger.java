package oracle;

import io.openmessaging.storage.dledger.entry.DLedgerEntry;
import io.openmessaging.storage.dledger.store.file.DLedgerMmapFileStore;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;

import java.io.File;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * DLedger commitlog stores (enableDLegerCommitLog=true): the broker's DLedgerCommitLog keeps its log under
 * STORE/dledger-SELFID/{data,index,checkpoint,currterm}; each message is the body of one DLedger entry.
 */
final class DLedger {
    private DLedger() {
    }

    /** A store written by DLedgerCommitLog: a dledger-ID/data/ folder. */
    static boolean isDLedgerStore(File root) {
        File[] kids = root.listFiles();
        if (kids == null) {
            return false;
        }
        for (File k : kids) {
            if (k.getName().startsWith("dledger-") && new File(k, "data").isDirectory()) {
                return true;
            }
        }
        return false;
    }

    /** dLegerPeers "n0-127.0.0.1:0": a free loopback port now (oracles may run in parallel; no port is on disk). */
    static void pickPort(org.apache.rocketmq.store.config.MessageStoreConfig cfg) throws Exception {
        String peers = cfg.getdLegerPeers();
        if (!cfg.isEnableDLegerCommitLog() || peers == null || !peers.endsWith("127.0.0.1:0")) {
            return;
        }
        try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            cfg.setdLegerPeers(peers.substring(0, peers.length() - 1) + s.getLocalPort());
        }
    }

    /** A one-node group elects itself after an election timeout; 4.9's put fails (NOT_LEADER) until then. */
    static void awaitLeader(DefaultMessageStore store, long timeoutMs) throws Exception {
        if (!(store.getCommitLog() instanceof org.apache.rocketmq.store.dledger.DLedgerCommitLog)) {
            return;
        }
        io.openmessaging.storage.dledger.DLedgerServer server =
            (io.openmessaging.storage.dledger.DLedgerServer) Reader.field(store.getCommitLog(), "dLedgerServer");
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!server.getMemberState().isLeader()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the one-node DLedger group elected no leader");
            }
            Thread.sleep(10);
        }
    }

    static DLedgerMmapFileStore fileStore(DefaultMessageStore store) throws Exception {
        return (DLedgerMmapFileStore) Reader.field(store.getCommitLog(), "dLedgerFileStore");
    }

    /**
     * The broker's view after load()/recovery: the entry range DLedger kept, and every message found through its
     * entry (lookMessageByOffset(entry pos + 48), the offset the broker's put returned). Returns a walk error or null.
     */
    static String walk(DefaultMessageStore store, Map<String, Object> out, List<MessageExt> decoded, List<Object> messages)
        throws Exception {
        DLedgerMmapFileStore fs = fileStore(store);
        Map<String, Object> d = new LinkedHashMap<>();
        d.put("ledger_begin_index", fs.getLedgerBeginIndex());
        d.put("ledger_end_index", fs.getLedgerEndIndex());
        d.put("ledger_end_term", fs.getLedgerEndTerm());
        d.put("committed_index", fs.getCommittedIndex());
        d.put("data_max_wrote_position", fs.getDataFileList().getMaxWrotePosition());
        d.put("index_max_wrote_position", fs.getIndexFileList().getMaxWrotePosition());
        List<Object> entries = new ArrayList<>();
        String err = null;
        for (long i = Math.max(0, fs.getLedgerBeginIndex()); i <= fs.getLedgerEndIndex(); i++) {
            DLedgerEntry e = fs.get(i);
            Map<String, Object> ej = new LinkedHashMap<>();
            ej.put("index", e.getIndex());
            ej.put("term", e.getTerm());
            ej.put("pos", e.getPos());
            ej.put("size", e.getSize());
            entries.add(ej);
            MessageExt m = store.lookMessageByOffset(e.getPos() + DLedgerEntry.BODY_OFFSET);
            if (m == null) {
                if (err == null) {
                    err = "decode failed at " + (e.getPos() + DLedgerEntry.BODY_OFFSET);
                }
                continue;
            }
            decoded.add(m);
            messages.add(Reader.msgJson(m));
        }
        d.put("entries", entries);
        out.put("dledger", d);
        return err;
    }
}
