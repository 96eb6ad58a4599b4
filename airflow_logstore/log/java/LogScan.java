package airflow_logstore;

import java.io.BufferedOutputStream;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteBufferDeserializer;

/**
 * A bulk scan of log partitions for Python (airflow_logstore/log/jvm_scan.py has the protocol): reads
 * [start, end) of each partition with the Java Kafka client and writes the records, as columns, to the
 * pipe the parent names (its only argument, /dev/fd/N), as frames of one partition's consecutive
 * records gathered over polls (up to the request's frame size in records sent, or 100,000 offsets), so
 * that Python handles buffers, not one object per record, and few of them.
 *
 * <p>The request comes on stdin (it may carry SASL credentials, so never in the arguments): one line
 * "key=value" per client setting, "--", the topic, the idle timeout in ms, the frame size (records sent
 * per frame at most), one line "partition start end"
 * per partition, "--", one line "partition first last" per dense span, "--", one line "partition first
 * last" per lookback range, and an empty line.
 *
 * <p>A dense span's records are known to the caller without their headers (the commit that wrote them
 * says so): they are left out of the frames and only counted by the frame's offset range, unless they
 * are in a lookback range or their key is <em>followed</em>: the key of a record of the partition sent
 * earlier for its headers (a superset of the keys the caller's planner tracks). Those are sent with
 * header set -1, their headers unread. Keys are followed only while dense spans lie ahead, so a scan
 * without dense spans (a read) holds none; otherwise they are as many as the records read for their
 * headers (failed attempts, records in flight, reversals), not the log's.
 *
 * <p>One consumer reads every partition. Frames (little-endian):
 *
 * <ul>
 *   <li>'H' id:int count:int, then per header: name (int length + UTF-8), value (int length or -1 + bytes):
 *       a header set, sent once, before the first record that has it;
 *   <li>'R' partition:int first:long last:long n:int offsets:long[n] headerSet:int[n] keyLength:int[n]
 *       (-1: null) keyBytes:int + bytes valueLength:int[n] valueBytes:int + bytes: of the partition's
 *       records at offsets [first, last], the n sent, in offset order;
 *   <li>'C': the header sets sent so far are forgotten; ids start again at 0 (at most 4096 are held);
 *   <li>'E': the end (every partition reached its end); 'X' length:int message: a failure (then exit 1).
 * </ul>
 *
 * Nothing is logged here: the settings may carry credentials.
 */
public final class LogScan {
    private static final Field KEY_BUFFER = rawField("keyBuffer");
    private static final Field VALUE_BUFFER = rawField("valueBuffer");
    /** Header sets known at once; more, and the ids start again (a 'C' frame) before the next frame. */
    private static final int MAX_HEADER_SETS = 4096;
    /** A position is known after a seek; a reset (retention) asks the broker, for at most this long. */
    private static final Duration TIMEOUT = Duration.ofSeconds(30);
    /** A frame covers at most this many offsets (then it is written, however few records it sends). */
    private static final long FRAME_OFFSETS = 100_000;
    private final OutputStream out;
    private final Map<List<Object>, Integer> headerSets = new HashMap<>();
    /** Per partition, the offsets whose headers are not needed (the caller knows them). */
    private final Map<Integer, Spans> dense = new HashMap<>();
    /** Per partition, the offsets whose every record is sent. */
    private final Map<Integer, Spans> lookback = new HashMap<>();
    /** Per partition, the keys of the records sent for their headers: the records of a dense span that
     * have one of them are sent too (the caller may follow those keys); the others are only counted. */
    private final Map<Integer, KeyHashes> followed = new HashMap<>();
    /** Per partition, the frame being gathered (its records' bytes copied: no poll's records stay alive). */
    private final Map<Integer, Frame> frames = new HashMap<>();
    private String topic;
    private int frameRecords;

    private LogScan(OutputStream out) {
        this.out = out;
    }

    public static void main(String[] args) throws Exception {
        // frames go to the pipe the parent passes (args[0], /dev/fd/N): the JVM's own messages (warnings,
        // a profiler's) may go to stdout
        OutputStream out = new BufferedOutputStream(new FileOutputStream(args[0]), 1 << 20);
        try {
            new LogScan(out).run(new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)));
            out.write('E');
        } catch (Exception e) {
            byte[] message = String.valueOf(e).getBytes(StandardCharsets.UTF_8);
            out.write('X');
            out.write(ints(message.length));
            out.write(message);
            out.flush();
            System.exit(1);
        }
        out.flush();
    }

    private void run(BufferedReader in) throws IOException {
        Properties settings = new Properties();
        String line;
        while (!(line = in.readLine()).equals("--")) {
            int at = line.indexOf('=');
            settings.put(line.substring(0, at), line.substring(at + 1));
        }
        topic = in.readLine();
        long idleMs = Long.parseLong(in.readLine().trim());
        frameRecords = Integer.parseInt(in.readLine().trim());
        Map<TopicPartition, long[]> pending = new HashMap<>();
        while (!(line = in.readLine()).equals("--")) {
            String[] parts = line.trim().split(" ");
            long start = Long.parseLong(parts[1]);
            long end = Long.parseLong(parts[2]);
            if (start < end) {
                pending.put(new TopicPartition(topic, Integer.parseInt(parts[0])), new long[] {start, end});
            }
        }
        dense.putAll(ranges(in, "--"));
        lookback.putAll(ranges(in, ""));
        settings.put("enable.auto.commit", "false");
        settings.putIfAbsent("auto.offset.reset", "earliest");
        // A poll's records are alive at once: more of them make each young collection copy more (with
        // 20,000, a third of a 4M-record scan's time went to collections); 1 MB fetches keep up.
        settings.putIfAbsent("max.poll.records", "2000");
        settings.putIfAbsent("max.partition.fetch.bytes", String.valueOf(1 << 20));
        settings.putIfAbsent("fetch.max.bytes", String.valueOf(3 << 20));
        scan(settings, pending, idleMs);
    }

    /** Lines "partition first last" up to ``end`` (or the end of input), per partition. */
    private static Map<Integer, Spans> ranges(BufferedReader in, String end) throws IOException {
        Map<Integer, List<long[]>> found = new HashMap<>();
        String line;
        while ((line = in.readLine()) != null && !line.equals(end)) {
            String[] parts = line.trim().split(" ");
            found.computeIfAbsent(Integer.parseInt(parts[0]), p -> new ArrayList<>())
                    .add(new long[] {Long.parseLong(parts[1]), Long.parseLong(parts[2])});
        }
        Map<Integer, Spans> result = new HashMap<>();
        for (Map.Entry<Integer, List<long[]>> entry : found.entrySet()) {
            result.put(entry.getKey(), new Spans(entry.getValue()));
        }
        return result;
    }

    private void scan(Properties settings, Map<TopicPartition, long[]> pending, long idleMs) throws IOException {
        // keys and values stay views of the fetched bytes (no copy per record): the few sent are copied
        KafkaConsumer<ByteBuffer, ByteBuffer> consumer =
                new KafkaConsumer<>(settings, new ByteBufferDeserializer(), new ByteBufferDeserializer());
        try {
            consumer.assign(pending.keySet());
            for (Map.Entry<TopicPartition, long[]> entry : pending.entrySet()) {
                consumer.seek(entry.getKey(), entry.getValue()[0]);
            }
            long lastProgress = System.nanoTime();
            while (!pending.isEmpty()) {
                ConsumerRecords<ByteBuffer, ByteBuffer> polled = consumer.poll(Duration.ofMillis(100));
                boolean progress = false;
                for (TopicPartition partition : polled.partitions()) {
                    long[] range = pending.get(partition);
                    if (range != null) {
                        progress |= gather(partition.partition(), polled.records(partition), range[1]);
                    }
                }
                progress |= settle(consumer, pending);
                if (progress) {
                    lastProgress = System.nanoTime();
                } else if (System.nanoTime() - lastProgress > idleMs * 1_000_000L) {
                    idle(consumer, pending, idleMs);
                    lastProgress = System.nanoTime();
                }
                writeDone(pending.keySet());
            }
        } finally {
            // at once: close() would wait for the fetch still in flight, which the broker holds for up
            // to fetch.max.wait.ms (500 ms) when the scan ended at the log's end; nothing in it is needed
            consumer.close(Duration.ZERO);
        }
    }

    /** Writes the frames of the partitions that are no longer read (all of them at the end). */
    private void writeDone(Set<TopicPartition> reading) throws IOException {
        for (Frame frame : frames.values()) {
            if (!frame.isEmpty() && !reading.contains(new TopicPartition(topic, frame.partition))) {
                write(frame);
            }
        }
    }

    private void write(Frame frame) throws IOException {
        frame.writeTo(out);
        out.flush(); // the caller works on each frame while the next is gathered
    }

    /** Drops the partitions whose position reached their end (gaps and markers count as reached). */
    private static boolean settle(KafkaConsumer<ByteBuffer, ByteBuffer> consumer, Map<TopicPartition, long[]> pending) {
        List<TopicPartition> done = new ArrayList<>();
        for (Map.Entry<TopicPartition, long[]> entry : pending.entrySet()) {
            if (consumer.position(entry.getKey(), TIMEOUT) >= entry.getValue()[1]) {
                done.add(entry.getKey());
            }
        }
        if (done.isEmpty()) {
            return false;
        }
        done.forEach(pending::remove);
        consumer.assign(pending.keySet());
        return true;
    }

    /**
     * No record for the idle timeout: a partition whose position reached its log's end is done (the
     * offsets left below its scan end are gone); with none such, the broker is not answering.
     */
    private static void idle(KafkaConsumer<ByteBuffer, ByteBuffer> consumer, Map<TopicPartition, long[]> pending, long idleMs) {
        Map<TopicPartition, Long> ends = consumer.endOffsets(pending.keySet(), Duration.ofMillis(idleMs));
        List<TopicPartition> done = new ArrayList<>();
        Map<Integer, Long> positions = new TreeMap<>();
        for (TopicPartition partition : pending.keySet()) {
            long position = consumer.position(partition, TIMEOUT);
            positions.put(partition.partition(), position);
            if (position >= ends.get(partition)) {
                done.add(partition);
            }
        }
        if (done.isEmpty()) {
            throw new IllegalStateException("no progress for " + idleMs / 1000 + "s (positions " + positions + ")");
        }
        done.forEach(pending::remove);
        consumer.assign(pending.keySet());
    }

    /**
     * Adds the polled records below ``end`` to the partition's frame, and writes the frame once it is
     * full; false when there are none. A record in a dense span is left out (the frame's offset range
     * counts it) unless it is in a lookback range or its key is followed; with no key followed and no
     * lookback range here, a dense span's records are not even looked at.
     */
    private boolean gather(int partition, List<ConsumerRecord<ByteBuffer, ByteBuffer>> polled, long end)
            throws IOException {
        int count = below(polled, 0, polled.size(), end);
        if (count == 0) {
            return false;
        }
        if (headerSets.size() >= MAX_HEADER_SETS) { // reversals carry one set each: bounded memory
            writeDone(Set.of()); // the ids of gathered records refer to the sets about to be forgotten
            headerSets.clear();
            out.write('C');
        }
        long first = polled.get(0).offset();
        long last = polled.get(count - 1).offset();
        Spans spans = dense.getOrDefault(partition, Spans.NONE);
        Spans recent = lookback.getOrDefault(partition, Spans.NONE);
        boolean lookbackHere = recent.overlaps(first, last);
        KeyHashes keys = followed.computeIfAbsent(partition, p -> new KeyHashes());
        Frame frame = frames.computeIfAbsent(partition, Frame::new);
        frame.begin(first);
        ByteBuffer[] previous = null;
        int previousId = -1;
        int span = spans.from(first);
        for (int i = 0; i < count; i++) {
            ConsumerRecord<ByteBuffer, ByteBuffer> record = polled.get(i);
            long offset = record.offset();
            ByteBuffer key = record.key();
            span = spans.from(span, offset);
            if (spans.holds(span, offset)) { // its headers are not read
                if (keys.isEmpty() && !lookbackHere) { // none of the span's records is sent
                    i = below(polled, i, count, spans.last(span) + 1) - 1;
                    continue;
                }
                boolean follow = key != null && keys.contains(key);
                if (!follow && !(lookbackHere && recent.holds(recent.from(offset), offset))) {
                    continue;
                }
                frame.add(offset, -1, key, record.value());
            } else {
                Header[] headers = record.headers().toArray();
                if (!sameHeaders(headers, previous)) {
                    previous = copy(headers);
                    previousId = headerSetId(headers);
                }
                frame.add(offset, previousId, key, record.value());
                if (key != null && span < spans.size()) { // followed in the dense spans still ahead
                    keys.add(key);
                }
            }
            if (frame.size() >= frameRecords) { // full: the next frame starts after this record
                frame.end(offset);
                write(frame);
                if (i + 1 < count) {
                    frame.begin(offset + 1);
                }
            }
        }
        if (!frame.isEmpty()) {
            frame.end(last);
            if (frame.offsets() >= FRAME_OFFSETS) {
                write(frame);
            }
        }
        return true;
    }

    /** The index in [from, to) of the first record at or above ``offset`` (``to`` if none): records are
     * in offset order, and only the O(log n) looked at are touched. */
    private static int below(List<ConsumerRecord<ByteBuffer, ByteBuffer>> polled, int from, int to, long offset) {
        int low = from;
        int high = to;
        while (low < high) {
            int middle = (low + high) >>> 1;
            if (polled.get(middle).offset() < offset) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        return low;
    }

    /** The bytes of a view (its position is left alone: it is a record's key or value). */
    private static byte[] bytes(ByteBuffer view) {
        byte[] copied = new byte[view.remaining()];
        view.duplicate().get(copied);
        return copied;
    }

    /**
     * Whether a record's headers are the names and bytes of ``previous`` (alternating name, value; a copy).
     * The client's headers hold their raw bytes until asked for a name (decoded from UTF-8) or a value
     * (copied): read here without either, per record the costly part of a scan.
     */
    private static boolean sameHeaders(Header[] headers, ByteBuffer[] previous) {
        if (previous == null || 2 * headers.length != previous.length) {
            return false;
        }
        for (int i = 0; i < headers.length; i++) {
            if (!raw(headers[i], KEY_BUFFER).equals(previous[2 * i])) {
                return false;
            }
            ByteBuffer value = raw(headers[i], VALUE_BUFFER);
            if (value == null ? previous[2 * i + 1] != null : !value.equals(previous[2 * i + 1])) {
                return false;
            }
        }
        return true;
    }

    /** A copy of the headers' names and values, for {@link #sameHeaders}. */
    private static ByteBuffer[] copy(Header[] headers) {
        ByteBuffer[] copied = new ByteBuffer[2 * headers.length];
        for (int i = 0; i < headers.length; i++) {
            copied[2 * i] = ByteBuffer.wrap(headers[i].key().getBytes(StandardCharsets.UTF_8));
            byte[] value = headers[i].value();
            copied[2 * i + 1] = value == null ? null : ByteBuffer.wrap(value);
        }
        return copied;
    }

    /** A header's name (``KEY_BUFFER``) or value (``VALUE_BUFFER``) bytes, without decoding or copying
     * them when the client still holds them raw; else from ``key()`` / ``value()``. */
    private static ByteBuffer raw(Header header, Field field) {
        if (field != null && header instanceof RecordHeader) {
            try {
                Object found = field.get(header);
                if (found != null) {
                    return (ByteBuffer) found;
                }
            } catch (IllegalAccessException e) {
                // fall through: decode
            }
        }
        if (field == KEY_BUFFER) {
            return ByteBuffer.wrap(header.key().getBytes(StandardCharsets.UTF_8));
        }
        byte[] value = header.value();
        return value == null ? null : ByteBuffer.wrap(value);
    }

    private static Field rawField(String name) {
        try {
            Field field = RecordHeader.class.getDeclaredField(name);
            field.setAccessible(true);
            return field;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null; // another client version: decode instead
        }
    }

    /** The id of a header set; a new one is written ('H') before any frame that uses it. */
    private int headerSetId(Header[] headers) throws IOException {
        List<Object> set = new ArrayList<>(headers.length * 2);
        for (Header header : headers) {
            set.add(header.key());
            set.add(header.value() == null ? null : ByteBuffer.wrap(header.value()));
        }
        Integer known = headerSets.get(set);
        if (known != null) {
            return known;
        }
        int id = headerSets.size();
        headerSets.put(set, id);
        out.write('H');
        out.write(ints(id, headers.length));
        for (Header header : headers) {
            byte[] name = header.key().getBytes(StandardCharsets.UTF_8);
            out.write(ints(name.length));
            out.write(name);
            byte[] value = header.value();
            out.write(ints(value == null ? -1 : value.length));
            if (value != null) {
                out.write(value);
            }
        }
        return id;
    }

    private static ByteBuffer buffer(int size) {
        return ByteBuffer.allocate(size).order(ByteOrder.LITTLE_ENDIAN);
    }

    private static byte[] ints(int... values) {
        ByteBuffer buffer = buffer(4 * values.length);
        for (int value : values) {
            buffer.putInt(value);
        }
        return buffer.array();
    }

    /**
     * One partition's records for an 'R' frame, gathered over polls: their offsets, header set ids and
     * the bytes of their keys and values, copied (a view would keep its whole fetch alive).
     */
    private static final class Frame {
        final int partition;
        private long first = -1;
        private long last;
        private final LongList offsets = new LongList();
        private final IntList sets = new IntList();
        private final IntList keyLengths = new IntList();
        private final IntList valueLengths = new IntList();
        private final ByteArrayOutputStream keys = new ByteArrayOutputStream();
        private final ByteArrayOutputStream values = new ByteArrayOutputStream();

        Frame(int partition) {
            this.partition = partition;
        }

        boolean isEmpty() {
            return first < 0;
        }

        int size() {
            return sets.size();
        }

        long offsets() {
            return isEmpty() ? 0 : last - first + 1;
        }

        /** The frame covers offsets from ``from`` on (unless it already covers earlier ones: consecutive
         * polls of a partition continue each other). */
        void begin(long from) {
            if (first < 0) {
                first = from;
            }
        }

        /** ... up to ``to``. */
        void end(long to) {
            last = to;
        }

        void add(long offset, int set, ByteBuffer key, ByteBuffer value) {
            offsets.add(offset);
            sets.add(set);
            keyLengths.add(append(keys, key));
            valueLengths.add(append(values, value));
        }

        private static int append(ByteArrayOutputStream to, ByteBuffer view) {
            if (view == null) {
                return -1;
            }
            if (view.hasArray()) {
                to.write(view.array(), view.arrayOffset() + view.position(), view.remaining());
            } else {
                to.writeBytes(bytes(view));
            }
            return view.remaining();
        }

        /** Writes the 'R' frame and starts an empty one. */
        void writeTo(OutputStream out) throws IOException {
            int n = size();
            ByteBuffer header = buffer(1 + 4 + 16 + 4 + 16 * n);
            header.put((byte) 'R').putInt(partition).putLong(first).putLong(last).putInt(n);
            for (int i = 0; i < n; i++) {
                header.putLong(offsets.get(i));
            }
            for (int i = 0; i < n; i++) {
                header.putInt(sets.get(i));
            }
            for (int i = 0; i < n; i++) {
                header.putInt(keyLengths.get(i));
            }
            out.write(header.array(), 0, header.position());
            out.write(ints(keys.size()));
            keys.writeTo(out);
            ByteBuffer lengths = buffer(4 * n);
            for (int i = 0; i < n; i++) {
                lengths.putInt(valueLengths.get(i));
            }
            out.write(lengths.array());
            out.write(ints(values.size()));
            values.writeTo(out);
            first = -1;
            offsets.clear();
            sets.clear();
            keyLengths.clear();
            valueLengths.clear();
            keys.reset();
            values.reset();
        }
    }

    /** Sorted, non-overlapping [first, last] offset ranges, as two arrays. */
    private static final class Spans {
        static final Spans NONE = new Spans(List.of());
        private final long[] firsts;
        private final long[] lasts;

        Spans(List<long[]> ranges) {
            long[][] sorted = ranges.toArray(new long[0][]);
            Arrays.sort(sorted, (a, b) -> Long.compare(a[0], b[0]));
            firsts = new long[sorted.length];
            lasts = new long[sorted.length];
            for (int i = 0; i < sorted.length; i++) {
                firsts[i] = sorted[i][0];
                lasts[i] = sorted[i][1];
            }
        }

        int size() {
            return lasts.length;
        }

        long last(int span) {
            return lasts[span];
        }

        /** The first span that ends at or after ``offset`` (``size()`` if none), by binary search. */
        int from(long offset) {
            int found = Arrays.binarySearch(lasts, offset);
            return found >= 0 ? found : -found - 1;
        }

        /** {@link #from(long)} for offsets that only grow: walks on from ``span``. */
        int from(int span, long offset) {
            while (span < lasts.length && lasts[span] < offset) {
                span++;
            }
            return span;
        }

        boolean holds(int span, long offset) {
            return span < lasts.length && firsts[span] <= offset;
        }

        boolean overlaps(long first, long last) {
            int span = from(first);
            return span < lasts.length && firsts[span] <= last;
        }
    }

    /**
     * A set of keys kept as 64-bit hashes of their bytes (open addressing, no object per key). Two keys
     * with one hash are one here: then a record of a key nobody follows is sent too, which costs the
     * caller a look at it and changes nothing (the caller follows keys by their bytes). Most keys looked
     * up are not in the set: a bit array of at least 16 bits per key, small enough to stay in the CPU's
     * cache, answers most of those without a look at the slots.
     */
    static final class KeyHashes {
        private long[] slots = new long[1024]; // 0: empty
        private long[] bits = new long[1024]; // 65,536 bits
        private int size;

        boolean isEmpty() {
            return size == 0;
        }

        boolean contains(ByteBuffer key) {
            long hash = hash(key);
            return (bits[bit(hash) >>> 6] & (1L << bit(hash))) != 0 && slots[slot(hash)] == hash;
        }

        void add(ByteBuffer key) {
            if (2 * (size + 1) > slots.length) {
                long[] old = slots;
                slots = new long[2 * old.length];
                bits = new long[Math.max(bits.length, old.length / 2)]; // 16 bits per slot, 32 per key at most
                size = 0;
                for (long hash : old) {
                    if (hash != 0) {
                        insert(hash);
                    }
                }
            }
            insert(hash(key));
        }

        /** The bit of ``hash`` in the bit array (its high bits pick it: the low ones pick the slot). */
        private int bit(long hash) {
            return (int) (hash >>> 40) & (64 * bits.length - 1);
        }

        /** The slot holding ``hash``, else the empty slot where it goes (linear probing). */
        private int slot(long hash) {
            int mask = slots.length - 1;
            int at = (int) hash & mask;
            while (slots[at] != hash && slots[at] != 0) {
                at = (at + 1) & mask;
            }
            return at;
        }

        private void insert(long hash) {
            bits[bit(hash) >>> 6] |= 1L << bit(hash);
            int at = slot(hash);
            if (slots[at] == 0) {
                slots[at] = hash;
                size++;
            }
        }

        /** FNV-1a over the key's bytes, then mixed (its low bits pick the slot); never 0. */
        static long hash(ByteBuffer key) {
            long hash = 0xcbf29ce484222325L;
            if (key.hasArray()) {
                byte[] array = key.array();
                for (int i = key.arrayOffset() + key.position(), end = i + key.remaining(); i < end; i++) {
                    hash = (hash ^ (array[i] & 0xff)) * 0x100000001b3L;
                }
            } else {
                for (int i = key.position(); i < key.limit(); i++) {
                    hash = (hash ^ (key.get(i) & 0xff)) * 0x100000001b3L;
                }
            }
            hash ^= hash >>> 33;
            hash *= 0xff51afd7ed558ccdL;
            hash ^= hash >>> 33;
            return hash == 0 ? 1 : hash;
        }
    }

    /** A growable int array (no boxing per record). */
    private static final class IntList {
        private int[] values = new int[16];
        private int size;

        void add(int value) {
            if (size == values.length) {
                values = Arrays.copyOf(values, size * 2);
            }
            values[size++] = value;
        }

        int get(int index) {
            return values[index];
        }

        int size() {
            return size;
        }

        void clear() {
            size = 0;
        }
    }

    /** A growable long array. */
    private static final class LongList {
        private long[] values = new long[16];
        private int size;

        void add(long value) {
            if (size == values.length) {
                values = Arrays.copyOf(values, size * 2);
            }
            values[size++] = value;
        }

        long get(int index) {
            return values[index];
        }

        void clear() {
            size = 0;
        }
    }
}
