package oracle;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.parser.Feature;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.Collection;
import java.util.Map;

/** Minimal pretty JSON writer (stable, insertion-ordered) + parsing through fastjson (present in both versions). */
public final class Json {
    private Json() {
    }

    @SuppressWarnings("unchecked")
    public static Map<String, Object> parseObject(String text) {
        Object o = JSON.parse(text, Feature.OrderedField);
        if (!(o instanceof Map)) {
            throw new IllegalArgumentException("expected a JSON object");
        }
        return (Map<String, Object>) o;
    }

    public static String write(Object o) {
        StringBuilder sb = new StringBuilder();
        write(sb, o, 0);
        sb.append('\n');
        return sb.toString();
    }

    private static void indent(StringBuilder sb, int n) {
        for (int i = 0; i < n; i++) {
            sb.append("  ");
        }
    }

    @SuppressWarnings("unchecked")
    private static void write(StringBuilder sb, Object o, int level) {
        if (o == null) {
            sb.append("null");
        } else if (o instanceof String) {
            str(sb, (String) o);
        } else if (o instanceof Boolean) {
            sb.append(o.toString());
        } else if (o instanceof Integer || o instanceof Long || o instanceof Short || o instanceof Byte
            || o instanceof BigInteger) {
            sb.append(o.toString());
        } else if (o instanceof BigDecimal) {
            sb.append(((BigDecimal) o).toPlainString());
        } else if (o instanceof Number) {
            sb.append(o.toString());
        } else if (o instanceof Map) {
            Map<Object, Object> m = (Map<Object, Object>) o;
            if (m.isEmpty()) {
                sb.append("{}");
                return;
            }
            sb.append("{\n");
            int i = 0;
            for (Map.Entry<Object, Object> e : m.entrySet()) {
                indent(sb, level + 1);
                str(sb, String.valueOf(e.getKey()));
                sb.append(": ");
                write(sb, e.getValue(), level + 1);
                if (++i < m.size()) {
                    sb.append(',');
                }
                sb.append('\n');
            }
            indent(sb, level);
            sb.append('}');
        } else if (o instanceof Collection || o instanceof Object[] || o instanceof long[] || o instanceof int[]) {
            Object[] arr;
            if (o instanceof Collection) {
                arr = ((Collection<?>) o).toArray();
            } else if (o instanceof long[]) {
                long[] la = (long[]) o;
                arr = new Object[la.length];
                for (int i = 0; i < la.length; i++) {
                    arr[i] = la[i];
                }
            } else if (o instanceof int[]) {
                int[] ia = (int[]) o;
                arr = new Object[ia.length];
                for (int i = 0; i < ia.length; i++) {
                    arr[i] = ia[i];
                }
            } else {
                arr = (Object[]) o;
            }
            if (arr.length == 0) {
                sb.append("[]");
                return;
            }
            boolean scalars = true;
            for (Object x : arr) {
                if (x instanceof Map || x instanceof Collection) {
                    scalars = false;
                    break;
                }
            }
            if (scalars) {
                sb.append('[');
                for (int i = 0; i < arr.length; i++) {
                    if (i > 0) {
                        sb.append(", ");
                    }
                    write(sb, arr[i], level + 1);
                }
                sb.append(']');
                return;
            }
            sb.append("[\n");
            for (int i = 0; i < arr.length; i++) {
                indent(sb, level + 1);
                write(sb, arr[i], level + 1);
                if (i + 1 < arr.length) {
                    sb.append(',');
                }
                sb.append('\n');
            }
            indent(sb, level);
            sb.append(']');
        } else {
            str(sb, o.toString());
        }
    }

    private static void str(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20 || c == 0x7f || (c >= 0xD800 && c <= 0xDFFF && !validSurrogate(s, i))) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
            }
        }
        sb.append('"');
    }

    private static boolean validSurrogate(String s, int i) {
        char c = s.charAt(i);
        if (Character.isHighSurrogate(c)) {
            return i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1));
        }
        return i > 0 && Character.isHighSurrogate(s.charAt(i - 1));
    }
}
