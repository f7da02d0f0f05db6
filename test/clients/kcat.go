package clients

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kcat drives the kcat binary (librdkafka) as a child process: `kcat -P`
// reading "key<TAB>value" lines from stdin that the driver writes at
// cfg.Rate.
//
// kcat reports delivery only at verbosity 3 (-vv), on stderr, as
// "% Message delivered to partition P (offset O) on broker B" per record,
// with neither key nor any other identity, and "% Delivery failed for
// message: ERR" with not even a partition. The driver therefore:
//
//   - makes partitioning predictable: -X partitioner=murmur2_random (the
//     Java-compatible hash; every record here has a key, so nothing is
//     random) and computes each key's partition itself from the topic's
//     partition count, which it reads from the cluster first;
//   - maps each report to its record by following librdkafka's "msg" and
//     "protocol" debug lines (-d msg,protocol: every request built, sent,
//     delivered or failed; see kcat_reports.go): reports do not come in
//     send order, not even within a partition, when a retry lets a later
//     request go first, which librdkafka does with idempotence off whatever
//     its in-flight limit; the driver fails the run when the lines do not
//     add up (a report no delivered batch accounts for, a batch's offsets
//     not consecutive, an outcome of another size than its request);
//   - sets max.in.flight.requests.per.connection=1 with idempotence off,
//     as an application that wants its order kept would (it narrows
//     reordering to retries);
//   - attributes failure reports to the records left without a success
//     report when kcat exits (kcat cannot say which record failed).
//
// librdkafka before 2.11.1 enables gzip, snappy and lz4 only when the broker
// still serves Produce v0, which Kafka 4.0 and kfake dropped: it then sends
// batches uncompressed without telling (debug log "Broker does not support
// compression type gzip: not compressing batch"). Debian's kcat 1.7.1 is
// built on librdkafka 2.0.2, so with an older librdkafka those codecs return
// ErrUnsupported; zstd (which needs Produce v7) works.
//
// kcat's -H headers are fixed for a whole run, so the per-record baton-seq
// header is impossible: Headers returns ErrUnsupported. kcat 1.7.1 reads
// stdin with fread in 1 KiB chunks, so with a Rate records leave kcat in
// bursts of about 1 KiB of input and their reports come with the next
// burst or at the end; the average rate holds. Changing the topic's
// partition count during a run breaks the mapping (the run fails).
//
// Security: TLS (ssl.ca.location, and ssl.certificate.location and
// ssl.key.location for mTLS) and SASL PLAIN and SCRAM (sasl.mechanisms,
// sasl.username, sasl.password). OAUTHBEARER with a given token returns
// ErrUnsupported: librdkafka takes a token only from its refresh callback,
// which kcat cannot set. So does SCRAM with a librdkafka before 2.6.1
// (Debian's 2.0.2): it gets the client-final message's nonce wrong
// (kcatSASLUsable).
type Kcat struct {
	// Path is the kcat binary; "" means "kcat" on PATH.
	Path string
	// extra are more kcat arguments, after the driver's (tests set
	// librdkafka properties with them).
	extra []string
}

// Name is "kcat".
func (Kcat) Name() string { return "kcat" }

const kcatInstall = "install kcat: run test/clients/install.sh (apt-get install -y kcat)"

// Produce implements Producer.
func (k Kcat) Produce(ctx context.Context, cfg ProduceConfig, onAck func(Ack)) error {
	if err := checkProduceConfig(cfg); err != nil {
		return err
	}
	if err := noTransactions("kcat", cfg); err != nil {
		return err
	}
	if cfg.Headers {
		return fmt.Errorf("%w: kcat: -H headers are the same for every record of a run, so no per-record baton-seq header", ErrUnsupported)
	}
	if a := cfg.Security.SASL; a != nil && a.Mechanism == MechOAuthBearer {
		// librdkafka takes a token from its refresh callback, which a
		// command-line tool cannot set, or mints an unsecured JWT of its
		// own (enable.sasl.oauthbearer.unsecure.jwt) or fetches one
		// (sasl.oauthbearer.method=oidc): never one it is given.
		return fmt.Errorf("%w: kcat: OAUTHBEARER with a given token (librdkafka takes tokens only from its refresh callback, which kcat cannot set)", ErrUnsupported)
	}
	if strings.ContainsAny(cfg.KeyPrefix, "\t\n") {
		return fmt.Errorf("%w: kcat: key prefix %q holds the driver's key or line delimiter", ErrUnsupported, cfg.KeyPrefix)
	}
	path := k.Path
	if path == "" {
		path = "kcat"
	}
	bin, err := exec.LookPath(path)
	if err != nil {
		return fmt.Errorf("%w: kcat: %s (%v)", ErrUnavailable, kcatInstall, err)
	}
	if err := kcatCodecUsable(bin, codecName(cfg.Compression)); err != nil {
		return err
	}
	if err := kcatSASLUsable(bin, cfg.Security); err != nil {
		return err
	}
	n, err := topicPartitions(ctx, cfg.Bootstrap, cfg.Security, cfg.Topic)
	if err != nil {
		return fmt.Errorf("clients: kcat: learning %s's partition count: %w", cfg.Topic, err)
	}

	// Each key's partition, and per partition the records in send order.
	part := kgo.StickyKeyPartitioner(nil).ForTopic(cfg.Topic)
	queues := make(map[int32][]int)
	for seq := 0; seq < cfg.Records; seq++ {
		p := int32(part.Partition(&kgo.Record{Key: []byte(Key(cfg.KeyPrefix, seq))}, n))
		queues[p] = append(queues[p], seq)
	}
	reports := newKcatReports(cfg.Topic, cfg.Idempotent, queues)

	args := []string{
		"-F", "none", // no ~/.config/kcat.conf: the run is what the driver says
		"-P", "-b", cfg.Bootstrap, "-t", cfg.Topic,
		"-K", "\t", "-v", "-v",
		"-d", "msg,protocol", // what each request held and when it went: see kcatReports
		"-X", "client.id=baton-kcat",
		"-X", "acks=all",
		"-X", "enable.idempotence=" + strconv.FormatBool(cfg.Idempotent),
		"-X", "partitioner=murmur2_random",
		"-z", codecName(cfg.Compression),
	}
	if !cfg.Idempotent {
		args = append(args, "-X", "max.in.flight.requests.per.connection=1")
	}
	if cfg.Persistent {
		args = append(args, "-E") // do not exit on "all brokers down"
	}
	args = append(args, kcatSecurity(cfg.Security)...)
	args = append(args, k.extra...)

	t := newAckTracker(cfg, onAck)
	var failures []string
	res, err := runChild(ctx, childSpec{
		client: "kcat",
		path:   bin,
		args:   args,
		feed: func(ctx context.Context, w io.Writer) error {
			bw := bufio.NewWriter(w)
			p := newPacer(cfg)
			for seq := 0; seq < cfg.Records; seq++ {
				if err := p.wait(ctx, seq); err != nil {
					return err
				}
				if _, err := fmt.Fprintf(bw, "%s\t%s\n", Key(cfg.KeyPrefix, seq), Value(cfg.KeyPrefix, seq)); err != nil {
					return err
				}
				// Unpaced, let bufio batch the writes; paced, hand each
				// line over when it is due; everything before a pause.
				if cfg.Rate > 0 || seq == cfg.Records-1 || seq+1 == cfg.PauseAt {
					if err := bw.Flush(); err != nil {
						return err
					}
				}
			}
			return nil
		},
		handle: func(l procLine) bool {
			if !l.stderr {
				return false
			}
			return reports.line(l.text, func(seq int, p int32, off int64) {
				t.report(Ack{Seq: seq, Key: Key(cfg.KeyPrefix, seq), Partition: p, Offset: off})
			}, func(msg string) { failures = append(failures, msg) })
		},
	})
	if err != nil {
		return err
	}
	mapErr := reports.err
	if mapErr == nil && !res.killed {
		mapErr = reports.unreported()
	}
	switch {
	case res.killed:
		t.failRest(fmt.Sprintf("kcat driver stopped before the client reported this record: %v", ctx.Err()))
		return fmt.Errorf("clients: kcat: %w", ctx.Err())
	case mapErr != nil:
		t.failRest("kcat delivery reports could not be mapped to records")
		return fmt.Errorf("clients: kcat: %w (%s)", mapErr, res.describe())
	}
	if !t.complete() {
		n := t.missing()
		msg := "kcat exited without a delivery report for this record"
		if len(failures) > 0 {
			msg = fmt.Sprintf("kcat reported %d delivery failures (it does not say for which records): %s", len(failures), strings.Join(uniqueStrings(failures), "; "))
		}
		t.failRest(msg)
		if len(failures) != n {
			// Failure reports account for some records only: kcat
			// itself went wrong.
			return fmt.Errorf("clients: kcat: %d records without a delivery report, %d failure reports (%s)", n, len(failures), res.describe())
		}
		return nil
	}
	if res.waitErr != nil || res.feedErr != nil {
		return fmt.Errorf("clients: kcat: every record reported, but kcat failed: %s", res.describe())
	}
	return nil
}

func uniqueStrings(ss []string) []string {
	seen := make(map[string]bool)
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// topicPartitions asks the cluster for topic's partition count, letting
// the cluster auto-create the topic as a client's first produce would, and
// waiting (up to 30 s) while the topic or its leaders are not ready.
func topicPartitions(ctx context.Context, bootstrap string, sec Security, topic string) (int, error) {
	cl, err := securedKgo(ctx, bootstrap, sec, kgo.ClientID("baton-matrix-metadata"))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		req.AllowAutoTopicCreation = true
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			if len(resp.Topics) != 1 {
				return 0, fmt.Errorf("metadata answered %d topics for 1", len(resp.Topics))
			}
			rt := resp.Topics[0]
			err = kerr.ErrorForCode(rt.ErrorCode)
			if err == nil && len(rt.Partitions) == 0 {
				err = errors.New("topic has no partitions yet")
			}
			if err == nil {
				return len(rt.Partitions), nil
			}
			var ke *kerr.Error
			if errors.As(err, &ke) && !ke.Retriable {
				return 0, err
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// kcatSecurity are the librdkafka properties (-X) of sec: the security
// protocol, the CA and the client certificate, and PLAIN or SCRAM
// credentials (OAUTHBEARER is refused earlier).
func kcatSecurity(sec Security) []string {
	var args []string
	x := func(k, v string) { args = append(args, "-X", k+"="+v) }
	x("security.protocol", strings.ToLower(sec.Protocol()))
	if t := sec.TLS; t != nil {
		x("ssl.ca.location", t.CAFile)
		if t.CertFile != "" {
			x("ssl.certificate.location", t.CertFile)
			x("ssl.key.location", t.KeyFile)
		}
	}
	if a := sec.SASL; a != nil {
		x("sasl.mechanisms", a.Mechanism)
		x("sasl.username", a.User)
		x("sasl.password", a.Password)
	}
	return args
}

// kcatLibVersions caches the librdkafka version of each kcat binary.
var kcatLibVersions sync.Map // path -> [3]int

var kcatLibRE = regexp.MustCompile(`librdkafka (\d+)\.(\d+)\.(\d+)`)

// kcatLibrdkafka returns the librdkafka version bin was built with, from
// `kcat -V`.
func kcatLibrdkafka(bin string) ([3]int, error) {
	if v, ok := kcatLibVersions.Load(bin); ok {
		return v.([3]int), nil
	}
	out, err := exec.Command(bin, "-V").CombinedOutput()
	if err != nil {
		return [3]int{}, fmt.Errorf("clients: kcat -V: %v: %s", err, out)
	}
	m := kcatLibRE.FindSubmatch(out)
	if m == nil {
		return [3]int{}, fmt.Errorf("clients: kcat -V names no librdkafka version: %s", out)
	}
	var v [3]int
	for i := range v {
		v[i], _ = strconv.Atoi(string(m[i+1]))
	}
	kcatLibVersions.Store(bin, v)
	return v, nil
}

// kcatCodecUsable returns ErrUnsupported for a codec bin's librdkafka
// would silently not apply against brokers without Produce v0.
func kcatCodecUsable(bin, codec string) error {
	switch codec {
	case "gzip", "snappy", "lz4":
	default:
		return nil
	}
	v, err := kcatLibrdkafka(bin)
	if err != nil {
		return err
	}
	if versionAtLeast(v, [3]int{2, 11, 1}) {
		return nil
	}
	return fmt.Errorf("%w: kcat: its librdkafka %d.%d.%d sends %s batches uncompressed to brokers without Produce v0 (Kafka 4.0+, kfake); fixed in librdkafka 2.11.1",
		ErrUnsupported, v[0], v[1], v[2], codec)
}

// kcatSASLUsable returns ErrUnsupported for SCRAM with a librdkafka before
// 2.6.1: its client-final message repeats the client's nonce in front of
// the nonce the server sent (which already starts with it), so a server
// that checks the nonce as SCRAM requires (Kafka 4, the agent) refuses
// every authentication.
func kcatSASLUsable(bin string, sec Security) error {
	if sec.SASL == nil || (sec.SASL.Mechanism != MechScramSHA256 && sec.SASL.Mechanism != MechScramSHA512) {
		return nil
	}
	v, err := kcatLibrdkafka(bin)
	if err != nil {
		return err
	}
	if versionAtLeast(v, [3]int{2, 6, 1}) {
		return nil
	}
	return fmt.Errorf("%w: kcat: its librdkafka %d.%d.%d repeats the client nonce in SCRAM's client-final message, which Kafka 4 and the agent refuse; fixed in librdkafka 2.6.1",
		ErrUnsupported, v[0], v[1], v[2])
}

// kcatCodecs lists the codecs the kcat on PATH applies (all of them when
// kcat is missing: the driver then fails with ErrUnavailable anyway).
func kcatCodecs() []string {
	bin, err := exec.LookPath("kcat")
	var out []string
	for _, c := range []string{"gzip", "snappy", "lz4", "zstd"} {
		if err != nil || kcatCodecUsable(bin, c) == nil {
			out = append(out, c)
		}
	}
	return out
}

// versionAtLeast says whether v >= least.
func versionAtLeast(v, least [3]int) bool {
	for i := range v {
		if v[i] != least[i] {
			return v[i] > least[i]
		}
	}
	return true
}
