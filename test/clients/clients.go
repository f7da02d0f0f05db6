// Package clients owns the client matrix: one Producer driver per real Kafka
// client (kcat/librdkafka, kafkajs, the Java producer, confluent-kafka-python,
// franz-go, sarama) behind one small interface, so end-to-end and fault tests
// run the same scenario across all of them.
//
// Drivers that wrap another runtime run it as a child process and read one
// JSON line per acknowledgment from its stdout; the Go drivers call their
// library in process. Every driver reports every record's outcome exactly
// once.
package clients

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Sentinel errors.
var (
	// ErrUnavailable means the client's runtime or package is not installed.
	// `make test` installs every client; a test that sees this fails.
	ErrUnavailable = errors.New("clients: client not installed")
	// ErrUnsupported means the client cannot honour a ProduceConfig field
	// (for example a compression codec it lacks).
	ErrUnsupported = errors.New("clients: option not supported by this client")
)

// ProduceConfig says what a Producer writes.
type ProduceConfig struct {
	// Bootstrap is the comma-separated list of brokers (or the agent) to dial.
	Bootstrap string
	// Topic is written; it MUST exist or be auto-created by the cluster.
	Topic string
	// Records is how many records to send; MUST be at least 1.
	Records int
	// Rate is records per second; 0 means as fast as the client goes.
	Rate int
	// Idempotent turns the client's idempotent producer on (acks=all) or
	// off (acks=all, idempotence explicitly disabled).
	Idempotent bool
	// Compression is "", "none", "gzip", "snappy", "lz4" or "zstd".
	Compression string
	// Headers adds two headers to every record: baton-client=<name> and
	// baton-seq=<i>.
	Headers bool
	// KeyPrefix prefixes the key of record i: KeyPrefix + "-" + i. The value
	// is Value(KeyPrefix, i).
	KeyPrefix string
	// PauseAt, above 0 and below Records, splits the run in two: the client
	// sends records [0, PauseAt), then waits until Resume is closed before
	// it sends record PauseAt and the rest (paced at Rate again from then).
	// A test thereby orders an event of its own (a route change) before the
	// second part instead of racing a client whose speed it cannot know.
	// 0 (the default) sends every record without a pause.
	PauseAt int
	// Resume releases a run paused at PauseAt; it MUST be set with PauseAt.
	Resume <-chan struct{}
	// Persistent keeps the client running while every broker it knows is
	// down, as a long-running application does. Only kcat needs telling
	// (its -E): as a command-line tool it exits on librdkafka's "all
	// brokers down", which a librdkafka application only logs. Through an
	// agent the client knows one broker, so an agent restart is that.
	// false (the default) keeps each client's own behaviour.
	Persistent bool
	// Security is how the client connects: TLS (a CA; a certificate for
	// mTLS) and SASL (PLAIN, SCRAM-SHA-256/512 or OAUTHBEARER). The zero
	// value is plaintext without authentication. A driver whose client
	// cannot do what it asks returns ErrUnsupported.
	Security Security
	// Transactional, when set, makes the client a transactional producer
	// (Idempotent is then implied). Only the Java driver honours it; the
	// others return ErrUnsupported. nil (the default): no transactions.
	Transactional *Transactional
}

// Transactional is how a transactional producer writes: Records in
// transactions of PerTransaction records each. A record is reported acked
// only once its transaction committed, with the partition and offset its
// send was acked at; every record of a transaction that did not commit is
// reported failed: with its own send's error if it had one, else the
// transaction's (or DriverAborted for AbortEvery). A transaction the
// client can abort is aborted and the run goes on with the next; after a
// fatal error (fenced, a transactional id not authorized) every record
// left is reported failed with it.
type Transactional struct {
	// ID is the transactional.id (required).
	ID string
	// PerTransaction is the records of one transaction (default 10).
	PerTransaction int
	// AbortEvery, above 0, aborts every AbortEvery-th transaction on
	// purpose (counted from 1): its records must never be read
	// read_committed.
	AbortEvery int
}

// DriverAborted is the error text of a record the driver aborted on
// purpose (Transactional.AbortEvery).
const DriverAborted = "aborted by the driver"

// Ack is the outcome of one record, as the client reported it.
type Ack struct {
	// Seq is the record's index in [0, Records).
	Seq       int
	Key       string
	Partition int32
	Offset    int64
	// Err is the client's error text when the record failed; empty on
	// success.
	Err string
	// At is when the driver saw the acknowledgment.
	At time.Time
}

// Producer is one client of the matrix.
type Producer interface {
	// Name is the client's short name (kcat, kafkajs, java, python, franz,
	// sarama).
	Name() string
	// Produce sends cfg.Records records and calls onAck once per record, in
	// the order the client reported them, from one goroutine. It returns
	// when every record is acknowledged or failed, or ctx ends; it returns
	// an error only when the client itself could not run.
	Produce(ctx context.Context, cfg ProduceConfig, onAck func(Ack)) error
}

// Key is the key of record seq.
func Key(prefix string, seq int) string { return prefix + "-" + strconv.Itoa(seq) }

// Value is the value of record seq: recognisable in a dump and distinct per
// record.
func Value(prefix string, seq int) string { return "value of " + prefix + "-" + strconv.Itoa(seq) }
