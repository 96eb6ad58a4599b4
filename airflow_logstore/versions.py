"""The one place where the JVM side of the stack is pinned.

Spark's Python package (``pyspark``/``pyspark-client`` in pyproject.toml) must match ``SPARK_VERSION``;
the Iceberg runtime is built per Spark minor and Scala version. All coordinates below were resolved
against Maven Central before being pinned (see README, "Working version set").
"""

from __future__ import annotations

SPARK_VERSION = "4.1.1"
SPARK_MINOR = "4.1"
SCALA_BINARY = "2.13"
SCALA_VERSION = "2.13.17"  # the scala-library of the pyspark wheel's jars
ICEBERG_VERSION = "1.12.0"
KAFKA_VERSION = "4.1.1"
SQLITE_JDBC_VERSION = "3.50.3.0"
LOG4J_VERSION = "2.24.3"
KAFKA_CLIENTS_VERSION = "3.9.1"  # the Java client of the Spark jobs (Spark's Kafka source uses it too)

#: Maven coordinates of the Kafka broker (KRaft, single node) and its logging backend.
KAFKA_BROKER_ARTIFACTS: tuple[str, ...] = (
    f"org.apache.kafka:kafka_{SCALA_BINARY}:{KAFKA_VERSION}",
    f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
    f"org.apache.logging.log4j:log4j-core:{LOG4J_VERSION}",
)

#: Iceberg's REST catalog server (``org.apache.iceberg.rest.RESTCatalogServer`` and its servlet, from
#: the open-api test fixtures and core's test jar) with a JDBC (SQLite) backend and S3FileIO, for the
#: cluster profile (logstore_dev/services/rest_catalog.py, in the repository). 1.11.0: the newest release
#: that publishes the fixtures.
REST_CATALOG_ICEBERG_VERSION = "1.11.0"
REST_CATALOG_JETTY_VERSION = "12.1.8"  # what Iceberg 1.11.0 builds the fixtures with
REST_CATALOG_ARTIFACTS: tuple[str, ...] = (
    f"org.apache.iceberg:iceberg-open-api:{REST_CATALOG_ICEBERG_VERSION}:test-fixtures",
    f"org.apache.iceberg:iceberg-core:{REST_CATALOG_ICEBERG_VERSION}:tests",
    f"org.apache.iceberg:iceberg-core:{REST_CATALOG_ICEBERG_VERSION}",
    f"org.apache.iceberg:iceberg-aws:{REST_CATALOG_ICEBERG_VERSION}",
    f"org.apache.iceberg:iceberg-aws-bundle:{REST_CATALOG_ICEBERG_VERSION}",
    f"org.eclipse.jetty.ee10:jetty-ee10-servlet:{REST_CATALOG_JETTY_VERSION}",
    f"org.eclipse.jetty.compression:jetty-compression-server:{REST_CATALOG_JETTY_VERSION}",
    f"org.eclipse.jetty.compression:jetty-compression-gzip:{REST_CATALOG_JETTY_VERSION}",
    f"org.xerial:sqlite-jdbc:{SQLITE_JDBC_VERSION}",
    "org.slf4j:slf4j-simple:2.0.17",
)

#: Jars added to Spark: Iceberg runtime, the Kafka source for streaming, the catalog's JDBC driver.
#: Listed one by one (no transitive resolution) so nothing Spark already ships is duplicated.
SPARK_EXTRA_ARTIFACTS: tuple[str, ...] = (
    f"org.apache.iceberg:iceberg-spark-runtime-{SPARK_MINOR}_{SCALA_BINARY}:{ICEBERG_VERSION}",
    f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{SPARK_VERSION}",
    f"org.apache.spark:spark-token-provider-kafka-0-10_{SCALA_BINARY}:{SPARK_VERSION}",
    f"org.apache.kafka:kafka-clients:{KAFKA_CLIENTS_VERSION}",
    "org.apache.commons:commons-pool2:2.12.1",
    f"org.xerial:sqlite-jdbc:{SQLITE_JDBC_VERSION}",
)

#: What the package's Java programs (``write/java/LogProducer.java``, ``log/java/LogScan.java``) are
#: compiled against when the wheel is built (setup.py): the APIs of the Spark and Kafka client jars they
#: run with. Only their signatures matter; the jobs run on the jars of the pyspark wheel and the Spark jars.
JAVA_COMPILE_ARTIFACTS: tuple[str, ...] = (
    f"org.apache.spark:spark-core_{SCALA_BINARY}:{SPARK_VERSION}",
    f"org.apache.spark:spark-sql_{SCALA_BINARY}:{SPARK_VERSION}",
    f"org.apache.spark:spark-sql-api_{SCALA_BINARY}:{SPARK_VERSION}",
    f"org.apache.spark:spark-catalyst_{SCALA_BINARY}:{SPARK_VERSION}",
    f"org.apache.spark:spark-common-utils_{SCALA_BINARY}:{SPARK_VERSION}",
    f"org.apache.spark:spark-common-utils-java_{SCALA_BINARY}:{SPARK_VERSION}",  # the Java function types
    f"org.scala-lang:scala-library:{SCALA_VERSION}",
    f"org.apache.kafka:kafka-clients:{KAFKA_CLIENTS_VERSION}",
)

#: Hadoop of the pyspark wheel (``pyspark/jars/hadoop-client-api-*.jar``): hadoop-aws must match it.
HADOOP_VERSION = "3.4.2"
AWS_SDK_VERSION = "2.40.2"

#: Extra jars of a deployment on S3-compatible storage: the Iceberg AWS bundle (S3FileIO for tables),
#: and Hadoop's S3A with the two AWS SDK modules the bundle lacks (Spark's own reads of ``s3://``
#: input files). Checked together against moto by the cluster tests (tests/cluster/).
CLUSTER_EXTRA_ARTIFACTS: tuple[str, ...] = (
    f"org.apache.iceberg:iceberg-aws-bundle:{ICEBERG_VERSION}",
    f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}",
    f"software.amazon.awssdk:s3-transfer-manager:{AWS_SDK_VERSION}",
    f"software.amazon.awssdk:apache-client:{AWS_SDK_VERSION}",
)

#: Apache Flink, the third-party consumer the tests read the log with (PyFlink in its own environment,
#: ``tests/environments.py``), and its Kafka SQL connector (shaded: one jar). No connector is built for
#: Flink 2.3 yet.
FLINK_VERSION = "2.2.1"
FLINK_KAFKA_ARTIFACTS: tuple[str, ...] = ("org.apache.flink:flink-sql-connector-kafka:5.0.0-2.2",)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"


def maven_url(coordinate: str, repository: str = MAVEN_CENTRAL) -> str:
    """The download URL of ``group:artifact:version``'s jar."""
    group, artifact, version = coordinate.split(":")
    return f"{repository}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"


if __name__ == "__main__":  # used by the Dockerfiles: print the jar URLs Spark needs on a cluster
    for item in (*SPARK_EXTRA_ARTIFACTS, *CLUSTER_EXTRA_ARTIFACTS):
        print(maven_url(item))
