package bench;

import java.io.BufferedOutputStream;
import java.io.DataOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Benchmark only (bench/consume_bench.py): reads offsets [0, end) of partition 0 of a topic with the
 * Java Kafka client and, with "write", streams every record's offset, key, value and headers to stdout
 * (length-prefixed), the way a bulk scan would hand records to Python. Prints "records seconds" to stderr.
 */
public final class ConsumeScan {
    public static void main(String[] args) throws Exception {
        Properties settings = new Properties();
        settings.put("bootstrap.servers", args[0]);
        settings.put("enable.auto.commit", "false");
        settings.put("max.poll.records", "50000");
        settings.put("max.partition.fetch.bytes", args[3]);
        settings.put("fetch.max.bytes", "52428800");
        long end = Long.parseLong(args[2]);
        boolean write = args.length > 4 && args[4].equals("write");
        DataOutputStream out =
                new DataOutputStream(new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 20));
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(settings, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            TopicPartition partition = new TopicPartition(args[1], 0);
            consumer.assign(List.of(partition));
            consumer.seek(partition, 0);
            long count = 0;
            long started = System.nanoTime();
            while (consumer.position(partition) < end) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(100))) {
                    count++;
                    if (write) {
                        out.writeLong(record.offset());
                        bytes(out, record.key());
                        bytes(out, record.value());
                        Header[] headers = record.headers().toArray();
                        out.writeInt(headers.length);
                        for (Header header : headers) {
                            out.writeUTF(header.key());
                            bytes(out, header.value());
                        }
                    }
                }
            }
            out.flush();
            System.err.println(count + " " + (System.nanoTime() - started) / 1e9);
        }
    }

    private static void bytes(DataOutputStream out, byte[] value) throws java.io.IOException {
        out.writeInt(value == null ? -1 : value.length);
        if (value != null) {
            out.write(value);
        }
    }
}
