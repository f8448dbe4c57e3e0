// Prints, per file argument, one line: the file loaded by java.util.Properties.load(InputStream) -- the way
// BrokerStartup reads broker.conf -- as a JSON object, or "ERROR <exception>" when load() throws.
// Run as a single-file program: java tests/oracle/props/PropsDump.java FILE...
import java.io.BufferedInputStream;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Properties;
import java.util.TreeSet;

public class PropsDump {
    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\' || c < 0x20 || c > 0x7e) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        for (String f : args) {
            Properties p = new Properties();
            try (InputStream in = new BufferedInputStream(Files.newInputStream(Paths.get(f)))) {
                p.load(in);
            } catch (IllegalArgumentException e) {
                System.out.println("ERROR " + e.getClass().getSimpleName());
                continue;
            }
            StringBuilder b = new StringBuilder("{");
            for (String k : new TreeSet<>(p.stringPropertyNames())) {
                if (b.length() > 1) b.append(',');
                b.append(json(k)).append(':').append(json(p.getProperty(k)));
            }
            System.out.println(b.append('}'));
        }
    }
}
