// The Java producer of Baton's client matrix: Apache Kafka's own
// KafkaProducer (kafka-clients, the version test/kafka pins) writing exactly
// what clients.ProduceConfig asks for, and printing one JSON line per record
// outcome on stdout, the line format of test/clients/run.go's scriptAck:
//
//   {"seq":3,"key":"p-3","partition":1,"offset":41}
//   {"seq":4,"key":"p-4","error":"TimeoutException: ..."}
//
// test/clients/java.go compiles this file with javac against the fetched
// kafka-clients jar and runs it as:
//
//   java -cp CLASSES:KAFKA_JARS BatonProducer --producer-config FILE
//        --topic T --records N [--rate R] [--key-prefix P] [--headers]
//        [--client NAME] [--pause-at N --resume-file FILE]
//        [--transactional-id ID [--per-transaction N] [--abort-every K]]
//
// The producer config file carries bootstrap.servers, acks, idempotence,
// compression and the security settings (GivenToken below serves an
// OAUTHBEARER token the driver was given). Record i has key P-i, value "value of P-i" and, with
// --headers, the headers baton-client=NAME and baton-seq=i. Every record is
// reported exactly once, whether its send callback fires or send() throws.
// With --pause-at, records from N on wait until FILE exists (paced again
// from then).
// With --transactional-id the producer is transactional (transactional.id
// ID): it writes the records in transactions of N (default 10), aborting
// every K-th on purpose (counted from 1; 0, the default: none), and reports
// a record acked only once its transaction committed; every record of a
// transaction that did not commit is reported with its send's error, else
// the transaction's ("aborted by the driver" for --abort-every). An
// abortable error aborts the transaction and the run goes on; a fatal one
// (abortTransaction fails too) fails every record left. --pause-at then
// pauses at the first transaction starting at or after N, never inside
// one.
// Nothing but ack lines goes to stdout (logging goes to stderr).

import java.io.BufferedOutputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.locks.LockSupport;

import javax.security.auth.callback.Callback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.auth.SaslExtensionsCallback;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerTokenCallback;
import org.apache.kafka.common.serialization.StringSerializer;

public final class BatonProducer {
    private final PrintStream out;
    private final AtomicIntegerArray reported;

    private BatonProducer(PrintStream out, int records) {
        this.out = out;
        this.reported = new AtomicIntegerArray(records);
    }

    public static void main(String[] args) throws Exception {
        // Keep the real stdout for ack lines; anything else printing to
        // System.out (a logging default) lands on stderr.
        PrintStream acks = new PrintStream(
                new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16),
                false, StandardCharsets.UTF_8);
        System.setOut(System.err);

        String configFile = null, topic = null, prefix = "", client = "java";
        String resumeFile = null, txnID = null;
        int records = -1, rate = 0, pauseAt = 0, perTxn = 10, abortEvery = 0;
        boolean headers = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--producer-config": configFile = args[++i]; break;
                case "--topic": topic = args[++i]; break;
                case "--records": records = Integer.parseInt(args[++i]); break;
                case "--rate": rate = Integer.parseInt(args[++i]); break;
                case "--key-prefix": prefix = args[++i]; break;
                case "--client": client = args[++i]; break;
                case "--pause-at": pauseAt = Integer.parseInt(args[++i]); break;
                case "--resume-file": resumeFile = args[++i]; break;
                case "--headers": headers = true; break;
                case "--transactional-id": txnID = args[++i]; break;
                case "--per-transaction": perTxn = Integer.parseInt(args[++i]); break;
                case "--abort-every": abortEvery = Integer.parseInt(args[++i]); break;
                default:
                    System.err.println("BatonProducer: unknown argument " + args[i]);
                    System.exit(2);
            }
        }
        if (configFile == null || topic == null || records < 1 || rate < 0) {
            System.err.println("BatonProducer: need --producer-config, --topic, --records >= 1 (and --rate >= 0)");
            System.exit(2);
        }
        if (perTxn < 1 || abortEvery < 0) {
            System.err.println("BatonProducer: need --per-transaction >= 1 and --abort-every >= 0");
            System.exit(2);
        }
        if (pauseAt < 0 || (pauseAt > 0 && resumeFile == null)) {
            System.err.println("BatonProducer: --pause-at needs a value >= 0 and, above 0, --resume-file");
            System.exit(2);
        }

        Properties props = new Properties();
        try (InputStream in = new FileInputStream(configFile)) {
            props.load(in);
        }
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        if (txnID != null) {
            props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnID);
            props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        }

        BatonProducer bp = new BatonProducer(acks, records);
        byte[] clientBytes = client.getBytes(StandardCharsets.UTF_8);
        if (txnID != null) {
            bp.transactional(props, topic, records, rate, prefix, headers, clientBytes, pauseAt, resumeFile, perTxn, abortEvery);
            for (int seq = 0; seq < records; seq++) {
                bp.report(seq, prefix + "-" + seq, null, new IllegalStateException("no outcome reported by the producer before close"));
            }
            acks.flush();
            System.exit(acks.checkError() ? 1 : 0);
        }
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            long start = System.nanoTime();
            for (int seq = 0; seq < records; seq++) {
                if (pauseAt > 0 && seq == pauseAt) {
                    // Callbacks run on the producer's I/O thread: acks keep
                    // coming while this one waits.
                    while (!Files.exists(Paths.get(resumeFile))) {
                        LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(20));
                    }
                    if (rate > 0) {
                        start = System.nanoTime() - (long) ((double) seq * TimeUnit.SECONDS.toNanos(1) / rate);
                    }
                }
                if (rate > 0) {
                    long due = start + (long) ((double) seq * TimeUnit.SECONDS.toNanos(1) / rate);
                    for (long wait; (wait = due - System.nanoTime()) > 0; ) {
                        LockSupport.parkNanos(wait);
                    }
                }
                final int s = seq;
                final String key = prefix + "-" + seq;
                String value = "value of " + key;
                List<Header> hs = null;
                if (headers) {
                    hs = new ArrayList<>(2);
                    hs.add(new RecordHeader("baton-client", clientBytes));
                    hs.add(new RecordHeader("baton-seq", Integer.toString(seq).getBytes(StandardCharsets.UTF_8)));
                }
                ProducerRecord<String, String> rec = new ProducerRecord<>(topic, null, key, value, hs);
                try {
                    producer.send(rec, (md, ex) -> bp.report(s, key, md, ex));
                } catch (Exception e) {
                    bp.report(s, key, null, e);
                }
            }
            producer.flush();
        }
        // close() completes every callback; anything still unreported is a
        // bug here, but report it rather than leave the driver waiting.
        for (int seq = 0; seq < records; seq++) {
            bp.report(seq, prefix + "-" + seq, null, new IllegalStateException("no outcome reported by the producer before close"));
        }
        acks.flush();
        System.exit(acks.checkError() ? 1 : 0);
    }

    private static ProducerRecord<String, String> record(String topic, String prefix, int seq, boolean headers, byte[] clientBytes) {
        String key = prefix + "-" + seq;
        List<Header> hs = null;
        if (headers) {
            hs = new ArrayList<>(2);
            hs.add(new RecordHeader("baton-client", clientBytes));
            hs.add(new RecordHeader("baton-seq", Integer.toString(seq).getBytes(StandardCharsets.UTF_8)));
        }
        return new ProducerRecord<>(topic, null, key, "value of " + key, hs);
    }

    /** The --transactional-id run: see the file's comment. */
    private void transactional(Properties props, String topic, int records, int rate, String prefix, boolean headers,
            byte[] clientBytes, int pauseAt, String resumeFile, int perTxn, int abortEvery) {
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            try {
                producer.initTransactions();
            } catch (RuntimeException e) {
                for (int seq = 0; seq < records; seq++) {
                    report(seq, prefix + "-" + seq, null, e);
                }
                return;
            }
            long start = System.nanoTime();
            boolean paused = pauseAt > 0;
            for (int first = 0, txn = 1; first < records; first += perTxn, txn++) {
                int end = Math.min(records, first + perTxn);
                if (paused && first >= pauseAt) {
                    while (!Files.exists(Paths.get(resumeFile))) {
                        LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(20));
                    }
                    paused = false;
                    if (rate > 0) {
                        start = System.nanoTime() - (long) ((double) first * TimeUnit.SECONDS.toNanos(1) / rate);
                    }
                }
                boolean abort = abortEvery > 0 && txn % abortEvery == 0;
                List<Future<RecordMetadata>> sent = new ArrayList<>(end - first);
                Exception failed = null;
                boolean fatal = false;
                try {
                    producer.beginTransaction();
                    for (int seq = first; seq < end; seq++) {
                        if (rate > 0) {
                            long due = start + (long) ((double) seq * TimeUnit.SECONDS.toNanos(1) / rate);
                            for (long wait; (wait = due - System.nanoTime()) > 0; ) {
                                LockSupport.parkNanos(wait);
                            }
                        }
                        sent.add(producer.send(record(topic, prefix, seq, headers, clientBytes)));
                    }
                    if (abort) {
                        producer.abortTransaction();
                    } else {
                        producer.commitTransaction();
                    }
                } catch (RuntimeException e) {
                    failed = e;
                    try {
                        producer.abortTransaction();
                    } catch (RuntimeException e2) {
                        fatal = true; // not abortable: the producer is done
                    }
                }
                for (int seq = first; seq < end; seq++) {
                    String key = prefix + "-" + seq;
                    Exception ex = failed;
                    if (ex == null && abort) {
                        ex = new IllegalStateException("aborted by the driver");
                    }
                    RecordMetadata md = null;
                    if (seq - first < sent.size()) {
                        try {
                            md = sent.get(seq - first).get();
                        } catch (ExecutionException e) {
                            // Its own send's error says most.
                            ex = e.getCause() instanceof Exception && !abort ? (Exception) e.getCause() : ex;
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                            ex = e;
                        }
                    } else if (ex == null) {
                        ex = new IllegalStateException("not sent");
                    }
                    report(seq, key, ex == null ? md : null, ex);
                }
                if (fatal) {
                    for (int seq = end; seq < records; seq++) {
                        report(seq, prefix + "-" + seq, null, failed);
                    }
                    return;
                }
            }
        }
    }

    private void report(int seq, String key, RecordMetadata md, Exception ex) {
        if (!reported.compareAndSet(seq, 0, 1)) {
            return;
        }
        StringBuilder b = new StringBuilder(96);
        b.append("{\"seq\":").append(seq).append(",\"key\":");
        quote(b, key);
        if (ex == null && md != null) {
            b.append(",\"partition\":").append(md.partition()).append(",\"offset\":").append(md.offset());
        } else {
            String msg = ex == null ? "no metadata and no exception" : ex.getClass().getSimpleName() + ": " + ex.getMessage();
            if (ex != null && ex.getCause() != null && ex.getCause() != ex) {
                msg += " (caused by " + ex.getCause().getClass().getSimpleName() + ": " + ex.getCause().getMessage() + ")";
            }
            b.append(",\"error\":");
            quote(b, msg);
        }
        b.append('}');
        synchronized (out) {
            out.println(b);
            out.flush();
        }
    }

    /**
     * GivenToken is the login callback handler of OAUTHBEARER with a token
     * the driver was given (sasl.login.callback.handler.class): Kafka's
     * own handlers mint an unsecured JWT or fetch one from an endpoint,
     * never take one as it is. The JAAS options batonToken, batonPrincipal
     * and batonExpiresMs carry the token and what the driver read of it.
     */
    public static final class GivenToken implements AuthenticateCallbackHandler {
        private String token, principal;
        private long expiresMs;

        @Override
        public void configure(Map<String, ?> configs, String mechanism, List<AppConfigurationEntry> entries) {
            for (AppConfigurationEntry e : entries) {
                Map<String, ?> o = e.getOptions();
                if (o.get("batonToken") != null) {
                    token = (String) o.get("batonToken");
                    principal = (String) o.get("batonPrincipal");
                    expiresMs = Long.parseLong((String) o.get("batonExpiresMs"));
                }
            }
            if (token == null) {
                throw new IllegalArgumentException("BatonProducer.GivenToken: no batonToken option in sasl.jaas.config");
            }
        }

        @Override
        public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
            for (Callback c : callbacks) {
                if (c instanceof OAuthBearerTokenCallback) {
                    final long start = System.currentTimeMillis();
                    ((OAuthBearerTokenCallback) c).token(new OAuthBearerToken() {
                        @Override public String value() { return token; }
                        @Override public Set<String> scope() { return Collections.emptySet(); }
                        @Override public long lifetimeMs() { return expiresMs; }
                        @Override public String principalName() { return principal; }
                        @Override public Long startTimeMs() { return start; }
                    });
                } else if (c instanceof SaslExtensionsCallback) {
                    // no extensions
                } else {
                    throw new UnsupportedCallbackException(c);
                }
            }
        }

        @Override
        public void close() {}
    }

    private static void quote(StringBuilder b, String s) {
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        b.append('"');
    }
}
