package oracle;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;

/** Calls into version-only classes (e.g. oracle.BatchCq, 5.x only) when the running build has them. */
final class Hooks {
    private Hooks() {
    }

    static Object call(String cls, String method, Object... args) throws Exception {
        Class<?> k;
        try {
            k = Class.forName(cls);
        } catch (ClassNotFoundException e) {
            return null;
        }
        for (Method m : k.getMethods()) {
            if (m.getName().equals(method) && m.getParameterCount() == args.length) {
                try {
                    return m.invoke(null, args);
                } catch (InvocationTargetException e) {
                    if (e.getCause() instanceof Exception) {
                        throw (Exception) e.getCause();
                    }
                    throw e;
                }
            }
        }
        throw new NoSuchMethodException(cls + "." + method);
    }
}
