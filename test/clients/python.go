package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Python drives confluent-kafka-python (librdkafka underneath) as a child
// process running test/clients/python/produce.py in the virtualenv that
// test/clients/install.sh makes, which prints one JSON line per delivery
// callback. The callback carries the record's partition and offset, so no
// mapping is needed. librdkafka builds in every codec. Security:
// librdkafka's security.protocol, ssl.ca.location (and
// ssl.certificate.location and ssl.key.location for mTLS) and sasl.*
// properties; OAUTHBEARER's given token through confluent-kafka's oauth_cb,
// with the token's sub and exp as its principal and expiry.
type Python struct {
	// Venv is the virtualenv; "" means $BATON_VENV, else
	// <user cache dir>/baton/venv (~/.cache/baton/venv), as install.sh.
	Venv string
	// Dir holds produce.py; "" means the python folder beside this
	// package's source.
	Dir string
}

// Name is "python".
func (Python) Name() string { return "python" }

const pythonInstall = "run test/clients/install.sh (python3 -m venv + pip install -r test/clients/python/requirements.txt)"

// DefaultVenv is the virtualenv the Python driver and install.sh use unless
// told otherwise: $BATON_VENV, else <user cache dir>/baton/venv.
func DefaultVenv() (string, error) {
	if v := os.Getenv("BATON_VENV"); v != "" {
		return v, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("clients: python: no cache directory for the venv (set BATON_VENV): %w", err)
	}
	return filepath.Join(cache, "baton", "venv"), nil
}

// Produce implements Producer. When ctx ends it kills the script's process
// group, reports every record without an outcome as failed and returns
// ctx's error.
func (p Python) Produce(ctx context.Context, cfg ProduceConfig, onAck func(Ack)) error {
	if err := checkProduceConfig(cfg); err != nil {
		return err
	}
	if err := noTransactions("python", cfg); err != nil {
		return err
	}
	venv := p.Venv
	if venv == "" {
		v, err := DefaultVenv()
		if err != nil {
			return err
		}
		venv = v
	}
	py := filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(py); err != nil {
		return fmt.Errorf("%w: python: no virtualenv at %s: %s", ErrUnavailable, venv, pythonInstall)
	}
	dir := p.Dir
	if dir == "" {
		src, err := sourceDir()
		if err != nil {
			return err
		}
		dir = filepath.Join(src, "python")
	}
	script := filepath.Join(dir, "produce.py")
	if _, err := os.Stat(script); err != nil {
		return fmt.Errorf("clients: python: driver script missing: %w", err)
	}
	resume, stopResume, err := resumeFile(ctx, cfg)
	if err != nil {
		return err
	}
	defer stopResume()
	arg, err := json.Marshal(scriptConfig{
		Client:      "python",
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
		return fmt.Errorf("clients: python: %w", err)
	}
	return produceWithScript(ctx, scriptRun{
		client:  "python",
		path:    py,
		args:    []string{"-u", script, string(arg)},
		dir:     dir,
		env:     []string{"PYTHONDONTWRITEBYTECODE=1"},
		install: pythonInstall,
	}, cfg, onAck)
}
