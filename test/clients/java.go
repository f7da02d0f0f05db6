package clients

import (
	"context"
	"crypto/sha256"
	_ "embed" // the Java producer's source
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/baton-kafka/baton/test/kafka"
)

// Java drives Apache Kafka's own Java producer (KafkaProducer from
// kafka-clients, at the version test/kafka pins) as a child JVM running
// test/clients/java/BatonProducer.java, which prints one JSON ack line per
// send callback, with the record's partition and offset.
//
// Why not Kafka's VerifiableProducer (kafka-tools)? It writes values
// "<prefix>.<i>" and keys that are null or cycle over --repeating-keys, and
// it sends no headers, so it cannot write Key(prefix, i) / Value(prefix, i)
// or the baton-client / baton-seq headers that the history checker relies
// on. BatonProducer is the same KafkaProducer with a hundred-line main that
// writes exactly the ProduceConfig, so the Java driver honours every field:
// all codecs (zstd-jni, snappy-java and lz4-java come with kafka-clients),
// headers, rate, idempotence on or off.
//
// The first Produce in a process fetches Kafka's jars (kafka.Classpath,
// Maven Central) if they are not cached and compiles BatonProducer with
// javac into kafka.CacheDir()/java-driver/<hash>, reused afterwards. The
// producer config is acks=all, enable.idempotence as asked (false set
// explicitly when off), compression.type, the Security (a PEM truststore;
// a PEM keystore for mTLS; PLAIN, SCRAM or OAUTHBEARER, the latter's given
// token served by BatonProducer.GivenToken, since Kafka's own login
// handlers only mint or fetch tokens), and Kafka's defaults otherwise.
// The zero value is ready to use.
type Java struct {
	// JavaHome is the JDK to run (its bin/java and bin/javac); "" means
	// $JAVA_HOME, else java and javac on PATH.
	JavaHome string
}

// Name is "java".
func (Java) Name() string { return "java" }

//go:embed java/BatonProducer.java
var javaProducerSource []byte

const javaInstall = "install a JDK 17+ (apt-get install -y openjdk-17-jdk-headless) and Maven (apt-get install -y maven); Kafka's jars come from Maven Central on first use"

// javaBuilt caches compiled class folders by hash, for the process.
var javaBuilt struct {
	mu   sync.Mutex
	dirs map[string]string
}

// Produce implements Producer. When ctx ends it kills the JVM, reports
// every record without an outcome as failed and returns ctx's error.
func (j Java) Produce(ctx context.Context, cfg ProduceConfig, onAck func(Ack)) error {
	if err := checkProduceConfig(cfg); err != nil {
		return err
	}
	java, err := j.tool("java")
	if err != nil {
		return err
	}
	javac, err := j.tool("javac")
	if err != nil {
		return err
	}
	cp, err := kafka.Classpath(ctx)
	if err != nil {
		if errors.Is(err, kafka.ErrUnavailable) {
			return fmt.Errorf("%w: java: fetching Kafka's jars: %v; %s", ErrUnavailable, err, javaInstall)
		}
		return fmt.Errorf("clients: java: fetching Kafka's jars: %w", err)
	}
	classes, err := buildJavaProducer(ctx, javac, cp)
	if err != nil {
		return err
	}

	tmp, err := os.MkdirTemp("", "baton-java-producer-*")
	if err != nil {
		return fmt.Errorf("clients: java: %w", err)
	}
	defer os.RemoveAll(tmp)
	conf := filepath.Join(tmp, "producer.properties")
	props, err := javaProducerConfig(cfg, tmp)
	if err != nil {
		return err
	}
	if err := os.WriteFile(conf, []byte(props), 0o600); err != nil {
		return fmt.Errorf("clients: java: %w", err)
	}

	args := []string{
		"-Xms64m", "-Xmx512m", "-XX:+UseSerialGC",
		// C1 only: one short run at a test's rate never repays C2.
		"-XX:TieredStopAtLevel=1",
		// kafka-clients logs through slf4j to log4j2's default config:
		// warnings and errors, on stderr (BatonProducer keeps stdout for
		// acks), where the driver keeps the tail for errors.
		"-Dlog4j2.level=WARN",
		"-cp", classes + string(os.PathListSeparator) + cp,
		"BatonProducer",
		"--producer-config", conf,
		"--topic", cfg.Topic,
		"--records", strconv.Itoa(cfg.Records),
		"--rate", strconv.Itoa(cfg.Rate),
		"--key-prefix", cfg.KeyPrefix,
		"--client", "java",
	}
	if cfg.Headers {
		args = append(args, "--headers")
	}
	if tx := cfg.Transactional; tx != nil {
		args = append(args, "--transactional-id", tx.ID, "--abort-every", strconv.Itoa(tx.AbortEvery))
		if tx.PerTransaction > 0 {
			args = append(args, "--per-transaction", strconv.Itoa(tx.PerTransaction))
		}
	}
	resume, stopResume, err := resumeFile(ctx, cfg)
	if err != nil {
		return err
	}
	defer stopResume()
	if resume != "" {
		args = append(args, "--pause-at", strconv.Itoa(cfg.PauseAt), "--resume-file", resume)
	}
	return produceWithScript(ctx, scriptRun{
		client:  "java",
		path:    java,
		args:    args,
		dir:     tmp,
		install: javaInstall,
	}, cfg, onAck)
}

// javaProducerConfig is the producer.properties for cfg. A client
// certificate goes into dir as a PEM keystore (key and chain in one file,
// as Kafka's PEM keystore reads them).
func javaProducerConfig(cfg ProduceConfig, dir string) (string, error) {
	var b strings.Builder
	w := func(k, v string) { fmt.Fprintf(&b, "%s=%s\n", k, javaPropEscape(v)) }
	w("bootstrap.servers", strings.Join(bootstrapList(cfg.Bootstrap), ","))
	w("client.id", "baton-java")
	w("acks", "all")
	w("enable.idempotence", strconv.FormatBool(cfg.Idempotent || cfg.Transactional != nil))
	w("compression.type", codecName(cfg.Compression))
	sec := cfg.Security
	w("security.protocol", sec.Protocol())
	if t := sec.TLS; t != nil {
		w("ssl.truststore.type", "PEM")
		w("ssl.truststore.location", t.CAFile)
		if t.CertFile != "" {
			key, err := os.ReadFile(t.KeyFile)
			if err != nil {
				return "", fmt.Errorf("clients: java: TLS key: %w", err)
			}
			chain, err := os.ReadFile(t.CertFile)
			if err != nil {
				return "", fmt.Errorf("clients: java: TLS certificate: %w", err)
			}
			ks := filepath.Join(dir, "keystore.pem")
			if err := os.WriteFile(ks, append(append(key, '\n'), chain...), 0o600); err != nil {
				return "", fmt.Errorf("clients: java: %w", err)
			}
			w("ssl.keystore.type", "PEM")
			w("ssl.keystore.location", ks)
		}
	}
	if a := sec.SASL; a != nil {
		w("sasl.mechanism", a.Mechanism)
		switch a.Mechanism {
		case MechPlain:
			w("sasl.jaas.config", fmt.Sprintf("org.apache.kafka.common.security.plain.PlainLoginModule required username=%s password=%s;",
				jaasQuote(a.User), jaasQuote(a.Password)))
		case MechScramSHA256, MechScramSHA512:
			w("sasl.jaas.config", fmt.Sprintf("org.apache.kafka.common.security.scram.ScramLoginModule required username=%s password=%s;",
				jaasQuote(a.User), jaasQuote(a.Password)))
		case MechOAuthBearer:
			principal, exp := tokenClaims(a.Token)
			w("sasl.login.callback.handler.class", "BatonProducer$GivenToken")
			w("sasl.jaas.config", fmt.Sprintf("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required batonToken=%s batonPrincipal=%s batonExpiresMs=%s;",
				jaasQuote(a.Token), jaasQuote(principal), jaasQuote(strconv.FormatInt(exp.UnixMilli(), 10))))
		default:
			return "", fmt.Errorf("%w: java: SASL mechanism %q", ErrUnsupported, a.Mechanism)
		}
	}
	return b.String(), nil
}

// javaPropEscape escapes a java.util.Properties value.
func javaPropEscape(v string) string {
	v = strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`).Replace(v)
	if strings.HasPrefix(v, " ") {
		v = `\` + v
	}
	return v
}

// jaasQuote quotes a JAAS option value.
func jaasQuote(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}

func (j Java) tool(name string) (string, error) {
	home := j.JavaHome
	if home == "" {
		home = os.Getenv("JAVA_HOME")
	}
	if home != "" {
		p := filepath.Join(home, "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if j.JavaHome != "" {
			return "", fmt.Errorf("%w: java: no %s in %s/bin: %s", ErrUnavailable, name, home, javaInstall)
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: java: no %s on PATH (%v): %s", ErrUnavailable, name, err, javaInstall)
	}
	return p, nil
}

// buildJavaProducer compiles BatonProducer.java against kafka-clients once
// per (source, jar, javac) and returns the folder of its classes. Several
// processes may race to build it: each compiles into its own temporary
// folder and renames it into place; the loser uses the winner's.
func buildJavaProducer(ctx context.Context, javac, cp string) (string, error) {
	var clientsJar string
	for _, p := range filepath.SplitList(cp) {
		if strings.HasPrefix(filepath.Base(p), "kafka-clients-") {
			clientsJar = p
		}
	}
	if clientsJar == "" {
		return "", fmt.Errorf("clients: java: no kafka-clients jar in the classpath from kafka.Classpath")
	}
	h := sha256.New()
	h.Write(javaProducerSource)
	fmt.Fprintf(h, "\x00%s\x00%s", clientsJar, javac)
	key := hex.EncodeToString(h.Sum(nil))[:16]

	javaBuilt.mu.Lock()
	defer javaBuilt.mu.Unlock()
	if d, ok := javaBuilt.dirs[key]; ok {
		return d, nil
	}
	cache, err := kafka.CacheDir()
	if err != nil {
		return "", fmt.Errorf("clients: java: %w", err)
	}
	root := filepath.Join(cache, "java-driver")
	final := filepath.Join(root, key)
	done := filepath.Join(final, "complete")
	if _, err := os.Stat(done); err != nil {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return "", fmt.Errorf("clients: java: %w", err)
		}
		tmp, err := os.MkdirTemp(root, key+".tmp-*")
		if err != nil {
			return "", fmt.Errorf("clients: java: %w", err)
		}
		defer os.RemoveAll(tmp) // gone after the rename, or a loser's copy
		src := filepath.Join(tmp, "BatonProducer.java")
		if err := os.WriteFile(src, javaProducerSource, 0o644); err != nil {
			return "", fmt.Errorf("clients: java: %w", err)
		}
		cmd := exec.CommandContext(ctx, javac, "--release", "17", "-nowarn", "-d", tmp, "-cp", clientsJar, src)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("clients: java: compiling BatonProducer.java with %s: %w\n%s", javac, err, out)
		}
		if err := os.WriteFile(filepath.Join(tmp, "complete"), nil, 0o644); err != nil {
			return "", fmt.Errorf("clients: java: %w", err)
		}
		if err := os.Rename(tmp, final); err != nil {
			if _, serr := os.Stat(done); serr != nil {
				return "", fmt.Errorf("clients: java: installing compiled classes in %s: %w", final, err)
			}
		}
	}
	if javaBuilt.dirs == nil {
		javaBuilt.dirs = map[string]string{}
	}
	javaBuilt.dirs[key] = final
	return final, nil
}
