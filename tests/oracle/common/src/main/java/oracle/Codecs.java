package oracle;

import org.apache.rocketmq.common.compression.CompressionType;
import org.apache.rocketmq.common.compression.Compressor;
import org.apache.rocketmq.common.compression.CompressorFactory;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Message body compression through the broker's own classes (CompressorFactory, MessageDecoder):
 * scenario messages with {"compressed": true, "compression": "LZ4"|"ZSTD"|"ZLIB"} are compressed with the
 * broker's Compressor (level 5, as MessageDecoder.encode does) and get COMPRESSED_FLAG | the type's flag;
 * {"corrupt_stream": true} keeps only the first half of the compressed bytes.
 * `decode --records FILE` ({"records": [base64 record, ...]}) decodes each stored record with
 * MessageDecoder.decode(buf, readBody=true, deCompressBody=true).
 */
final class Codecs {
    private Codecs() {
    }

    /** The body to store for a scenario message with a "compression" key. */
    static byte[] compress(Map<String, Object> m, byte[] body) throws Exception {
        CompressionType t = CompressionType.of(String.valueOf(m.get("compression")));
        byte[] c = CompressorFactory.getCompressor(t).compress(body, 5);
        if (Boolean.TRUE.equals(m.get("corrupt_stream"))) {
            c = Arrays.copyOf(c, c.length / 2);
        }
        return c;
    }

    static int flags(Map<String, Object> m) {
        return MessageSysFlag.COMPRESSED_FLAG
            | CompressionType.of(String.valueOf(m.get("compression"))).getCompressionFlag();
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> decode(String file) throws Exception {
        Map<String, Object> in = Json.parseObject(new String(Files.readAllBytes(Paths.get(file)),
            StandardCharsets.UTF_8));
        List<Object> out = new ArrayList<>();
        for (Object o : (List<Object>) in.get("records")) {
            byte[] rec = Base64.getDecoder().decode(String.valueOf(o));
            Map<String, Object> r = new LinkedHashMap<>();
            MessageExt m = MessageDecoder.decode(ByteBuffer.wrap(rec), true, true);
            if (m != null) {
                r.put("sys_flag", m.getSysFlag());
                r.put("body_b64", Base64.getEncoder().encodeToString(m.getBody() == null ? new byte[0] : m.getBody()));
            } else {
                // the decoder swallows the exception and returns null: say what the decompressor throws
                MessageExt raw = MessageDecoder.decode(ByteBuffer.wrap(rec), true, false);
                r.put("sys_flag", raw == null ? null : raw.getSysFlag());
                r.put("error", raw == null ? "undecodable record" : why(raw));
            }
            out.add(r);
        }
        Map<String, Object> res = new LinkedHashMap<>();
        res.put("results", out);
        return res;
    }

    private static String why(MessageExt raw) {
        try {
            Compressor c = CompressorFactory.getCompressor(MessageSysFlag.getCompressionType(raw.getSysFlag()));
            c.decompress(raw.getBody());
            return "decoder returned null";
        } catch (Throwable e) {
            return e.getClass().getSimpleName() + ": " + e.getMessage();
        }
    }
}
