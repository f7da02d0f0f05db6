package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Kafkajs drives kafkajs 2.2.4 under Node as a child process running
// test/clients/kafkajs/produce.js, which prints one JSON line per record.
//
// kafkajs's send() answers a base offset per partition, not per record:
// the script sends sequentially (up to 200 records per send, or the records
// due under cfg.Rate), notes each message's partition through a wrapper
// around kafkajs's default (murmur2) partitioner, and gives the k-th message
// of partition P in a send the offset baseOffset(P)+k. A failed send()
// fails all its records, even those whose partitions were written.
//
// kafkajs builds in only gzip: snappy, lz4 and zstd need codec packages
// this driver does not install, so they return ErrUnsupported. With
// idempotence on the script sets maxInFlightRequests=1, as kafkajs requires.
// Security: kafkajs's ssl (the CA; a certificate and key for mTLS) and sasl
// (plain, scram-sha-256, scram-sha-512, and oauthbearer with an
// oauthBearerProvider that hands out the given token).
type Kafkajs struct {
	// Node is the node binary; "" means "node" on PATH.
	Node string
	// Dir holds produce.js and node_modules; "" means the kafkajs folder
	// beside this package's source.
	Dir string
}

// Name is "kafkajs".
func (Kafkajs) Name() string { return "kafkajs" }

const kafkajsInstall = "run test/clients/install.sh (npm ci in test/clients/kafkajs)"

// Produce implements Producer. When ctx ends it kills the script's process
// group, reports every record without an outcome as failed and returns
// ctx's error.
func (k Kafkajs) Produce(ctx context.Context, cfg ProduceConfig, onAck func(Ack)) error {
	if err := checkProduceConfig(cfg); err != nil {
		return err
	}
	if err := noTransactions("kafkajs", cfg); err != nil {
		return err
	}
	switch codecName(cfg.Compression) {
	case "none", "gzip":
	default:
		return fmt.Errorf("%w: kafkajs builds in only gzip compression, not %s", ErrUnsupported, cfg.Compression)
	}
	node := k.Node
	if node == "" {
		node = "node"
	}
	nodeBin, err := exec.LookPath(node)
	if err != nil {
		return fmt.Errorf("%w: kafkajs: no node runtime (%v): install nodejs and npm (apt-get install -y nodejs npm), then %s", ErrUnavailable, err, kafkajsInstall)
	}
	dir := k.Dir
	if dir == "" {
		src, err := sourceDir()
		if err != nil {
			return err
		}
		dir = filepath.Join(src, "kafkajs")
	}
	script := filepath.Join(dir, "produce.js")
	if _, err := os.Stat(script); err != nil {
		return fmt.Errorf("clients: kafkajs: driver script missing: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "kafkajs", "package.json")); err != nil {
		return fmt.Errorf("%w: kafkajs: package not installed in %s: %s", ErrUnavailable, dir, kafkajsInstall)
	}
	resume, stopResume, err := resumeFile(ctx, cfg)
	if err != nil {
		return err
	}
	defer stopResume()
	arg, err := json.Marshal(scriptConfig{
		Client:      "kafkajs",
		Bootstrap:   cfg.Bootstrap,
		Topic:       cfg.Topic,
		Records:     cfg.Records,
		Rate:        cfg.Rate,
		Idempotent:  cfg.Idempotent,
		Compression: codecName(cfg.Compression),
		Headers:     cfg.Headers,
		KeyPrefix:   cfg.KeyPrefix,
		PauseAt:     cfg.PauseAt,
		ResumeFile:  resume,
		Security:    newScriptSecurity(cfg.Security),
	})
	if err != nil {
		return fmt.Errorf("clients: kafkajs: %w", err)
	}
	return produceWithScript(ctx, scriptRun{
		client: "kafkajs",
		path:   nodeBin,
		args:   []string{script, string(arg)},
		dir:    dir,
		// The script sets its own partitioner; keep kafkajs from warning
		// about the v2 default anyway.
		env:     []string{"KAFKAJS_NO_PARTITIONER_WARNING=1"},
		install: kafkajsInstall,
	}, cfg, onAck)
}
