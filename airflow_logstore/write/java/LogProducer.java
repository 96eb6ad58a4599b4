package airflow_logstore;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.CollectionAccumulator;
import org.apache.spark.util.TaskCompletionListener;

/**
 * One Spark task's share of a batch's log records: produced in input order with the batch's headers
 * (the task attempt's tag filled in here), flushed, reported as one JSON line. See
 * airflow_logstore/write/producing.py for the protocol; nothing here is logged (the settings may carry
 * SASL credentials).
 */
public final class LogProducer implements FlatMapFunction<Iterator<InternalRow>, String> {
    private static final long serialVersionUID = 1L;

    /**
     * Idle producers of this JVM per configuration, the most recently used last: a new idempotent one
     * first waits for its id. One unused for {@link #idleMillis()} is closed (its connections too: an
     * executor that produced once keeps no clients, nor their reconnect warnings once a broker is gone).
     */
    private static final Map<String, ConcurrentLinkedDeque<Idle>> IDLE = new ConcurrentHashMap<>();

    /** How long an idle producer is kept: system property {@value #IDLE_PROPERTY}, default 60 s. */
    public static final String IDLE_PROPERTY = "airflow_logstore.producer.idle.ms";

    private static final long DEFAULT_IDLE_MS = 60_000;

    private final String topic;
    private final TreeMap<String, String> settings;
    private final ArrayList<String> headerNames;
    private final ArrayList<String> headerValues;
    private final int taskHeader;
    private final TreeMap<String, String> testPoints;

    /**
     * @param headerNames the batch's header names, in order
     * @param headerValues their values (UTF-8 text); the one at {@code taskHeader} is replaced by the
     *     task attempt's tag
     * @param testPoints the pause and failure points' variables as the driver resolved them (empty
     *     outside tests; a variable missing here is read from the executor's environment)
     */
    public LogProducer(
            String topic,
            Map<String, String> settings,
            List<String> headerNames,
            List<String> headerValues,
            int taskHeader,
            Map<String, String> testPoints) {
        this.topic = topic;
        this.settings = new TreeMap<>(settings);
        this.headerNames = new ArrayList<>(headerNames);
        this.headerValues = new ArrayList<>(headerValues);
        this.taskHeader = taskHeader;
        this.testPoints = new TreeMap<>(testPoints);
    }

    /** The tag of one task attempt's records (task_identity in producing.py). */
    public static String taskIdentity(int partitionId, long taskAttemptId) {
        return partitionId + "." + taskAttemptId;
    }

    /**
     * A frame's rows as Spark's own rows, for the functions of this file: they read the binary and
     * string columns where they are, with no conversion to {@link Row} objects (and back, for the
     * rows the write-through hands on). The frame's plan runs as for Spark's own writes (its adaptive
     * stages first); a task may get the same row object for every row, so nothing keeps one.
     */
    public static JavaRDD<InternalRow> internalRows(Dataset<Row> frame) {
        return ((org.apache.spark.sql.classic.Dataset<Row>) frame).queryExecution().toRdd().toJavaRDD();
    }

    /** Produce every change of {@code changes} (see {@link #call}) in one Spark job; the tasks' reports. */
    public List<String> produce(Dataset<Row> changes) {
        return internalRows(changes).mapPartitions(this).collect();
    }

    /** The headers of one task attempt's records. */
    public List<Header> headers(String task) {
        List<Header> headers = new ArrayList<>(headerNames.size());
        for (int i = 0; i < headerNames.size(); i++) {
            String value = i == taskHeader ? task : headerValues.get(i);
            headers.add(new RecordHeader(headerNames.get(i), value.getBytes(StandardCharsets.UTF_8)));
        }
        return Collections.unmodifiableList(headers);
    }

    /** The headers as [name, value bytes] pairs (for tests from Python). */
    public List<Object[]> headerPairs(String task) {
        List<Object[]> pairs = new ArrayList<>();
        for (Header header : headers(task)) {
            pairs.add(new Object[] {header.key(), header.value()});
        }
        return pairs;
    }

    /**
     * Produce a task's rows: the record key, then up to two record values (the before-image's, the
     * after-image's; either may be null), sent in that order.
     */
    @Override
    public Iterator<String> call(Iterator<InternalRow> rows) throws Exception {
        TaskRun run = new TaskRun();
        while (rows.hasNext()) {
            run.sendChange(rows.next());
        }
        return Collections.singletonList(run.finish()).iterator();
    }

    /**
     * One task attempt's produce: its tag in the headers, a borrowed producer and its deliveries. A
     * task that ends before {@link #finish} (its input or its consumer failed) closes the producer at
     * the task's completion, so nothing still queued is delivered out of sight.
     */
    final class TaskRun {
        private final String task;
        private final RecordHeaders headers; // each record copies them (a list copy from this class)
        private final Deliveries deliveries = new Deliveries();
        private final KafkaProducer<byte[], byte[]> producer;
        private long sent;
        private long changes;
        private long noops;
        private boolean finished;

        TaskRun() throws IOException, InterruptedException {
            TaskContext context = TaskContext.get();
            task = context == null ? "0.0" : taskIdentity(context.partitionId(), context.taskAttemptId());
            headers = new RecordHeaders(headers(task));
            pause("produce:started");
            producer = borrow();
            if (context != null) {
                context.addTaskCompletionListener(
                        new TaskCompletionListener() {
                            @Override
                            public void onTaskCompletion(TaskContext ended) {
                                if (!finished) {
                                    abandon();
                                }
                            }
                        });
            }
        }

        /** The records of one change (key, before value, after value: see {@link #call}). */
        void sendChange(InternalRow row) {
            changes++;
            byte[] key = row.isNullAt(0) ? null : row.getBinary(0);
            if (!row.isNullAt(1)) {
                send(key, row.getBinary(1));
            }
            if (!row.isNullAt(2)) {
                send(key, row.getBinary(2));
            } else if (row.isNullAt(1)) {
                noops++;
            }
        }

        /**
         * Send one record; fail at the first failed delivery. A send that waited {@code max.block.ms}
         * for the topic's metadata in vain (the broker is gone) reports it to the callback instead of
         * throwing, and every further send would wait as long again: a task of n records would take n
         * times the configured timeout to fail.
         */
        void send(byte[] key, byte[] value) {
            try {
                producer.send(new ProducerRecord<>(topic, null, key, value, headers), deliveries);
                sent++;
                deliveries.failFast(sent, topic);
            } catch (RuntimeException failure) {
                abandon();
                throw failure;
            }
        }

        /** Flush, fail unless every record was acknowledged, give the producer back; the report. */
        String finish() throws IOException, InterruptedException {
            try {
                producer.flush();
                deliveries.check(sent, topic);
            } catch (RuntimeException failure) {
                abandon();
                throw failure;
            }
            finished = true;
            giveBack(producer);
            pause("produce:flushed");
            failOnce("produce:flushed");
            return deliveries.report(task, sent, changes, noops);
        }

        private void abandon() {
            finished = true;
            producer.close(Duration.ZERO); // nothing still queued may be delivered out of sight
        }
    }

    /**
     * The write-through of a batch that is appended: each task produces its share of the log records
     * while it hands the rows to append to the table's writer (one pass over the plan, one Spark job).
     *
     * <p>Input rows: the record key, the before-image's record value (or null), the after-image's
     * record value (or null), whether the row is appended, then the table's columns. Output rows: the
     * table's columns of the rows appended. The report counts the changes (input rows) and, among
     * them, the deletes of keys that have no row: the changes with neither record ({@code
     * noop_deletes}). When a task's input ends, it flushes, fails unless every
     * record was acknowledged, and adds its report to {@code reports} before its writer commits: Spark
     * merges a result task's accumulator updates only when the task succeeded, once per partition, so
     * the driver sees exactly the reports of the task attempts whose rows are written.
     */
    public static final class WriteThrough implements FlatMapFunction<Iterator<InternalRow>, InternalRow> {
        private static final long serialVersionUID = 1L;
        private static final int FIRST_COLUMN = 4;

        private final LogProducer producer;
        private final CollectionAccumulator<String> reports;
        private final StructType table;

        /** @param table the table's columns (the input's columns from {@code FIRST_COLUMN} on) */
        public WriteThrough(LogProducer producer, CollectionAccumulator<String> reports, StructType table) {
            this.producer = producer;
            this.reports = reports;
            this.table = table;
        }

        /** The rows the tasks of {@code rows} hand on (the table's columns), to be written by a writer. */
        public Dataset<Row> written(Dataset<Row> rows) {
            org.apache.spark.sql.classic.SparkSession session =
                    ((org.apache.spark.sql.classic.Dataset<Row>) rows).sparkSession();
            return session.internalCreateDataFrame(internalRows(rows).mapPartitions(this).rdd(), table, false);
        }

        @Override
        public Iterator<InternalRow> call(Iterator<InternalRow> rows) throws Exception {
            TaskRun run = producer.new TaskRun();
            StructField[] fields = table.fields();
            DataType[] types = new DataType[fields.length];
            for (int i = 0; i < types.length; i++) {
                types[i] = fields[i].dataType();
            }
            return new Iterator<InternalRow>() {
                private InternalRow next;
                private boolean ended;

                @Override
                public boolean hasNext() {
                    while (next == null && !ended) {
                        if (rows.hasNext()) {
                            next = consume(run, rows.next(), types);
                        } else {
                            ended = true;
                            reports.add(finish(run));
                        }
                    }
                    return next != null;
                }

                @Override
                public InternalRow next() {
                    if (!hasNext()) {
                        throw new NoSuchElementException();
                    }
                    InternalRow row = next;
                    next = null;
                    return row;
                }
            };
        }

        /**
         * Send a row's records; the row to append, if it is one: its table columns' values as they are
         * in the input row (the writer's first step copies them before this task reads its next row).
         */
        private static InternalRow consume(TaskRun run, InternalRow row, DataType[] types) {
            run.sendChange(row);
            if (!row.getBoolean(3)) {
                return null;
            }
            Object[] values = new Object[types.length];
            for (int i = 0; i < values.length; i++) {
                values[i] = row.get(FIRST_COLUMN + i, types[i]);
            }
            return new GenericInternalRow(values);
        }

        private static String finish(TaskRun run) {
            try {
                return run.finish();
            } catch (IOException | InterruptedException failure) {
                throw new IllegalStateException(failure.getMessage(), failure);
            }
        }
    }

    /**
     * One pass over a batch's changes (airflow_logstore/write/checking.py): how many there are, the
     * first bad one and, when asked, whether the batch changes each of its keys once. Input rows: the
     * row id (long), whether the row is bad (boolean), then, when keys are checked, a hash of the
     * row's key (long). Each task returns one array: its rows (8 bytes), its first bad row id (8
     * bytes, -1: none), the state of its hashes (1 byte: {@link #ONCE}, {@link #REPEATED}, or {@link
     * #UNCHECKED} when keys are not checked or the task has more than {@code hashLimit} rows), then
     * its sorted hashes (8 bytes each). {@link #summary} merges the tasks' arrays on the driver. Two
     * keys with the same hash count as a repeat: "once" may be a false "no", never a false "yes".
     */
    public static final class ChangeCheck implements FlatMapFunction<Iterator<InternalRow>, byte[]> {
        private static final long serialVersionUID = 1L;
        static final byte ONCE = 0;
        static final byte REPEATED = 1;
        static final byte UNCHECKED = 2;
        private static final int HEADER = 17;

        private final boolean hashKeys;
        private final int hashLimit;

        public ChangeCheck(boolean hashKeys, int hashLimit) {
            this.hashKeys = hashKeys;
            this.hashLimit = hashLimit;
        }

        /** The summary (see {@link #summary}) of the rows of {@code tagged}, in one Spark job. */
        public long[] check(Dataset<Row> tagged) {
            return summary(internalRows(tagged).mapPartitions(this).collect());
        }

        @Override
        public Iterator<byte[]> call(Iterator<InternalRow> rows) {
            long count = 0;
            long firstBad = -1;
            long[] hashes = hashKeys ? new long[1024] : null;
            int hashed = 0;
            while (rows.hasNext()) {
                InternalRow row = rows.next();
                count++;
                long id = row.getLong(0);
                if (row.getBoolean(1) && (firstBad < 0 || id < firstBad)) {
                    firstBad = id;
                }
                if (hashes != null) {
                    if (hashed == hashLimit) {
                        hashes = null; // too many to check: taken as repeating
                        continue;
                    }
                    if (hashed == hashes.length) {
                        hashes = Arrays.copyOf(hashes, Math.min(hashLimit, hashed * 2));
                    }
                    hashes[hashed++] = row.getLong(2);
                }
            }
            byte state = UNCHECKED;
            if (hashes != null) {
                Arrays.sort(hashes, 0, hashed);
                state = repeats(hashes, hashed) ? REPEATED : ONCE;
            }
            int kept = state == ONCE ? hashed : 0;
            ByteBuffer out = ByteBuffer.allocate(HEADER + 8 * kept);
            out.putLong(count).putLong(firstBad).put(state);
            for (int i = 0; i < kept; i++) {
                out.putLong(hashes[i]);
            }
            return Collections.singletonList(out.array()).iterator();
        }

        /**
         * The batch's rows, its first bad row id (-1: none) and whether it changes each key once (1),
         * a key more than once (0), or was not checked (-1), from the tasks' arrays (see {@link #call}).
         */
        public long[] summary(List<byte[]> tasks) {
            long count = 0;
            long firstBad = -1;
            byte state = ONCE;
            int total = 0;
            for (byte[] task : tasks) {
                ByteBuffer in = ByteBuffer.wrap(task);
                count += in.getLong();
                long bad = in.getLong();
                if (bad >= 0 && (firstBad < 0 || bad < firstBad)) {
                    firstBad = bad;
                }
                state = (byte) Math.max(state, in.get()); // UNCHECKED over REPEATED over ONCE
                total += (task.length - HEADER) / 8;
            }
            if (state == ONCE) {
                state = allOnce(tasks, total) ? ONCE : REPEATED;
            }
            long keys = state == ONCE ? 1 : state == REPEATED ? 0 : -1;
            return new long[] {count, firstBad, keys};
        }

        private static boolean allOnce(List<byte[]> tasks, int total) {
            long[] hashes = new long[total];
            int count = 0;
            for (byte[] task : tasks) {
                ByteBuffer in = ByteBuffer.wrap(task, HEADER, task.length - HEADER);
                while (in.hasRemaining()) {
                    hashes[count++] = in.getLong();
                }
            }
            Arrays.sort(hashes); // sorted runs, one per task: merged in linear time
            return !repeats(hashes, count);
        }

        private static boolean repeats(long[] sorted, int count) {
            for (int i = 1; i < count; i++) {
                if (sorted[i] == sorted[i - 1]) {
                    return true;
                }
            }
            return false;
        }
    }

    // -- delivery reports ------------------------------------------------------------------------

    /** Counts acknowledgements and keeps (first, last) offset per partition; the first error. */
    private static final class Deliveries implements Callback {
        private final TreeMap<Integer, long[]> spans = new TreeMap<>();
        private long acknowledged;
        private volatile Exception error; // read by every send (failFast) without the lock

        @Override
        public synchronized void onCompletion(RecordMetadata metadata, Exception exception) {
            if (exception != null) {
                if (error == null) {
                    error = exception;
                }
                return;
            }
            acknowledged++;
            long offset = metadata.offset();
            long[] span = spans.get(metadata.partition());
            if (span == null) {
                spans.put(metadata.partition(), new long[] {offset, offset});
            } else {
                span[0] = Math.min(span[0], offset);
                span[1] = Math.max(span[1], offset);
            }
        }

        /** {@link #check}'s error once a delivery failed (the sends go on otherwise). */
        void failFast(long sent, String topic) {
            if (error != null) {
                check(sent, topic);
            }
        }

        synchronized void check(long sent, String topic) {
            if (error != null || acknowledged != sent) {
                throw new IllegalStateException(
                        (sent - acknowledged)
                                + " of "
                                + sent
                                + " records to '"
                                + topic
                                + "' were not acknowledged"
                                + (error == null ? "" : ": " + error),
                        error);
            }
        }

        synchronized String report(String task, long count, long changes, long noops) {
            StringBuilder json = new StringBuilder("{\"task\":\"").append(task).append("\",\"count\":");
            json.append(count).append(",\"changes\":").append(changes);
            json.append(",\"noop_deletes\":").append(noops).append(",\"offsets\":{");
            String separator = "";
            for (Map.Entry<Integer, long[]> entry : spans.entrySet()) {
                json.append(separator).append('"').append(entry.getKey()).append("\":[");
                json.append(entry.getValue()[0]).append(',').append(entry.getValue()[1]).append(']');
                separator = ",";
            }
            return json.append("}}").toString();
        }
    }

    // -- producers -------------------------------------------------------------------------------

    private KafkaProducer<byte[], byte[]> borrow() {
        Idle idle = idle().pollLast();
        if (idle != null) {
            return idle.producer;
        }
        Properties properties = new Properties();
        properties.putAll(settings);
        return new KafkaProducer<>(properties, new ByteArraySerializer(), new ByteArraySerializer());
    }

    private void giveBack(KafkaProducer<byte[], byte[]> producer) {
        idle().addLast(new Idle(producer, System.nanoTime()));
        Sweeper.start();
    }

    private ConcurrentLinkedDeque<Idle> idle() {
        return IDLE.computeIfAbsent(settings.toString(), k -> new ConcurrentLinkedDeque<>());
    }

    /** A producer given back at {@code since} (System.nanoTime). */
    private record Idle(KafkaProducer<byte[], byte[]> producer, long since) {}

    static long idleMillis() {
        return Long.getLong(IDLE_PROPERTY, DEFAULT_IDLE_MS);
    }

    /**
     * Closes the producers idle for longer than {@link #idleMillis()} (all of them: {@code everyOne}).
     * Only the thread that takes an entry out of its queue closes it, so one borrowed meanwhile is not.
     */
    static void closeIdle(boolean everyOne) {
        long now = System.nanoTime();
        long limit = TimeUnit.MILLISECONDS.toNanos(idleMillis());
        for (ConcurrentLinkedDeque<Idle> queue : IDLE.values()) {
            for (Idle idle : queue) {
                if ((everyOne || now - idle.since > limit) && queue.remove(idle)) {
                    try {
                        idle.producer.close(Duration.ZERO); // it flushed before it was given back
                    } catch (RuntimeException ignored) {
                        // closing is best effort; the next sweep must still run
                    }
                }
            }
        }
    }

    /** One daemon thread per JVM that closes idle producers every second, started at the first give-back;
     * at the JVM's exit, the idle producers are closed. */
    private static final class Sweeper {
        private static final ScheduledExecutorService SERVICE = Executors.newSingleThreadScheduledExecutor(
                runnable -> {
                    Thread thread = new Thread(runnable, "logstore-idle-producers");
                    thread.setDaemon(true);
                    return thread;
                });

        static {
            SERVICE.scheduleWithFixedDelay(() -> closeIdle(false), 1, 1, TimeUnit.SECONDS);
            try {
                Runtime.getRuntime()
                        .addShutdownHook(new Thread(() -> closeIdle(true), "logstore-idle-producers-exit"));
            } catch (IllegalStateException exiting) {
                // the JVM is exiting already: its sockets go with it; a failed initialization here would
                // make every later give-back fail
            }
        }

        static void start() {
            // the class's initialization (once per JVM) starts the thread
        }
    }

    // -- pause and failure points (airflow_logstore/pause.py, the file protocol) -----------------

    private String variable(String name) {
        String value = testPoints.get(name);
        return value != null ? value : System.getenv(name);
    }

    private boolean named(String variable, String point) {
        String names = variable(variable);
        if (names == null) {
            return false;
        }
        for (String part : names.split(",")) {
            if (part.trim().equals(point)) {
                return true;
            }
        }
        return false;
    }

    private Path pauseFile(String point, String suffix) {
        String folder = variable("LOGSTORE_PAUSE_DIR");
        if (folder == null || folder.isEmpty()) {
            throw new IllegalStateException(
                    "pause point '" + point + "' is named in LOGSTORE_PAUSE_AT but LOGSTORE_PAUSE_DIR is unset");
        }
        return Paths.get(folder, point.replace(':', '_') + "." + suffix);
    }

    void pause(String point) throws IOException, InterruptedException {
        if (!named("LOGSTORE_PAUSE_AT", point)) {
            return;
        }
        String pid = Long.toString(ProcessHandle.current().pid());
        Files.write(pauseFile(point, "reached"), pid.getBytes(StandardCharsets.UTF_8));
        Path release = pauseFile(point, "release");
        long deadline = System.nanoTime() + Duration.ofSeconds(600).toNanos();
        while (!Files.exists(release)) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("pause point '" + point + "' was never released (" + release + ")");
            }
            Thread.sleep(50);
        }
    }

    void failOnce(String point) throws IOException {
        if (!named("LOGSTORE_FAIL_ONCE_AT", point)) {
            return;
        }
        Path marker = pauseFile(point, "failed");
        try {
            Files.write(
                    Files.createFile(marker),
                    Long.toString(ProcessHandle.current().pid()).getBytes(StandardCharsets.UTF_8));
        } catch (FileAlreadyExistsException already) {
            return;
        }
        throw new IllegalStateException("injected failure at '" + point + "' (LOGSTORE_FAIL_ONCE_AT)");
    }
}
