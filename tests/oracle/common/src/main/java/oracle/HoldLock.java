package oracle;

import java.io.File;
import java.io.RandomAccessFile;
import java.nio.channels.FileLock;
import java.util.LinkedHashMap;
import java.util.Map;

/** Takes the store lock the way DefaultMessageStore.start() does: RandomAccessFile(rw) + tryLock(0, 1, false). */
final class HoldLock {
    private HoldLock() {
    }

    static int run(String store) throws Exception {
        File f = new File(store, "lock");
        if (f.getParentFile() != null) {
            f.getParentFile().mkdirs();
        }
        RandomAccessFile raf = new RandomAccessFile(f, "rw");
        FileLock lock = raf.getChannel().tryLock(0, 1, false);
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("locked", lock != null && !lock.isShared() && lock.isValid());
        r.put("path", f.getAbsolutePath());
        Main.emit(r);
        if (lock == null) {
            return 1;
        }
        // hold until stdin is closed (or we are killed)
        byte[] buf = new byte[256];
        while (System.in.read(buf) >= 0) {
            // keep holding
        }
        lock.release();
        raf.close();
        return 0;
    }
}
