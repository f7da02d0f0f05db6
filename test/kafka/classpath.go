package kafka

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// fetch.sh is the one implementation of fetching; Go runs the embedded copy
// so that callers need no source tree.
//
//go:embed fetch.sh pom.xml
var fetchFiles embed.FS

// CacheDir is where fetched jars live: $BATON_CACHE, else
// $HOME/.cache/baton. Kafka's jars are in CacheDir()/kafka-<version>/libs.
func CacheDir() (string, error) {
	if d := os.Getenv("BATON_CACHE"); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("kafka: no cache folder: %w", err)
	}
	return filepath.Join(home, ".cache", "baton"), nil
}

// Java returns the java launcher: $JAVA_HOME/bin/java if JAVA_HOME is set,
// else java on PATH. The error wraps ErrUnavailable.
func Java() (string, error) {
	return jdkTool("java")
}

func jdkTool(name string) (string, error) {
	if h := os.Getenv("JAVA_HOME"); h != "" {
		p := filepath.Join(h, "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s not found on PATH or in $JAVA_HOME/bin", ErrUnavailable, name)
	}
	return p, nil
}

// fetchSem serialises fetches (a channel so waiters can give up with their
// context); fetched caches classpaths by "kind-version", guarded by fetchSem.
var (
	fetchSem = make(chan struct{}, 1)
	fetched  = map[string]string{}
)

// Classpath makes sure the jars of Kafka DefaultVersion (broker, tools,
// client, log4j2) are fetched and returns them as a java classpath, the jar
// paths joined with ':'. The first call in a process may run Maven (through
// fetch.sh); later ones return at once. Safe for concurrent use.
func Classpath(ctx context.Context) (string, error) {
	return classpathFor(ctx, "kafka", DefaultVersion)
}

// MirrorClasspath is Classpath for MirrorMaker 2 (connect-mirror,
// connect-runtime and the client they were built with, at
// DefaultMirrorVersion): run org.apache.kafka.connect.mirror.MirrorMaker
// with it.
func MirrorClasspath(ctx context.Context) (string, error) {
	return classpathFor(ctx, "mirror", DefaultMirrorVersion)
}

func classpathFor(ctx context.Context, kind, version string) (string, error) {
	select {
	case fetchSem <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("kafka: waiting to fetch %s %s jars: %w", kind, version, ctx.Err())
	}
	defer func() { <-fetchSem }()
	key := kind + "-" + version
	if cp, ok := fetched[key]; ok {
		return cp, nil
	}
	libs, err := runFetch(ctx, kind, version)
	if err != nil {
		return "", err
	}
	jars, err := filepath.Glob(filepath.Join(libs, "*.jar"))
	if err != nil || len(jars) == 0 {
		return "", fmt.Errorf("kafka: fetch.sh reported %s but it holds no jars (%v)", libs, err)
	}
	sort.Strings(jars)
	cp := strings.Join(jars, string(os.PathListSeparator))
	fetched[key] = cp
	return cp, nil
}

// runFetch runs the embedded fetch.sh and returns the libs folder it prints.
func runFetch(ctx context.Context, kind, version string) (string, error) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		return "", fmt.Errorf("%w: bash not found to run fetch.sh", ErrUnavailable)
	}
	tmp, err := os.MkdirTemp("", "baton-fetch-*")
	if err != nil {
		return "", fmt.Errorf("kafka: fetching jars: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, name := range []string{"fetch.sh", "pom.xml"} {
		b, err := fetchFiles.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("kafka: embedded %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			return "", fmt.Errorf("kafka: fetching jars: %w", err)
		}
	}
	args := []string{filepath.Join(tmp, "fetch.sh")}
	if kind == "mirror" {
		args = append(args, "--mirror")
	}
	args = append(args, version)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bash, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = runAttached(ctx, cmd)
	if err != nil {
		var ee *exec.ExitError
		msg := strings.TrimSpace(lastLines(stderr.String(), 30))
		if errors.As(err, &ee) && ee.ExitCode() == 3 {
			return "", fmt.Errorf("%w: fetch.sh %s %s: %s", ErrUnavailable, kind, version, msg)
		}
		return "", fmt.Errorf("kafka: fetch.sh %s %s: %w\n%s", kind, version, err, msg)
	}
	out := strings.TrimSpace(stdout.String())
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	if out == "" || !filepath.IsAbs(out) {
		return "", fmt.Errorf("kafka: fetch.sh %s %s printed no libs folder (stdout %q)", kind, version, stdout.String())
	}
	return out, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
