// The JVM case's server (corpus/manifest.json, jvm-gc): an HTTP server on
// the JDK's own com.sun.net.httpserver, one serving thread (the
// dispatcher), whose every request allocates a fixed amount of short-lived
// garbage and keeps a small object alive for a while, as a cache or a
// session table would. At a fixed request rate eden fills at a fixed
// period, and each young collection stops the serving thread while it
// copies the survivors: garbage-collection pauses by construction, timed
// by the JVM itself in its -Xlog:gc file.
//
// java GcServer.java PORT GARBAGE_KB KEPT_KB KEPT_REQUESTS
import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;

public class GcServer {
    static byte[][] kept;
    static long served;
    static long sink;

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        int garbage = Integer.parseInt(args[1]) * 1024;
        int keptSize = Integer.parseInt(args[2]) * 1024;
        kept = new byte[Integer.parseInt(args[3])][];
        byte[] body = "ok\n".getBytes();
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 1024);
        server.createContext("/", exchange -> {
            // Garbage in small pieces (as parsing and formatting make it),
            // touched so that the allocation is not optimised away.
            for (int done = 0; done < garbage; done += 1024) {
                byte[] b = new byte[1024];
                b[(int) (served & 1023)] = 1;
                sink += b[0];
            }
            kept[(int) (served % kept.length)] = new byte[keptSize];
            served++;
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        // No executor: the dispatcher thread serves every request itself.
        server.setExecutor(null);
        server.start();
    }
}
