// Package access reads the control plane's access files (API tokens, API
// identities, agent identities) and the identities of verified TLS client
// certificates, alike for the agents' gRPC services and the HTTP API.
//
// The access files are YAML lists read once at start. They are read alike
// so that a mistake in any of them is refused alike: unknown fields are
// errors (a misspelt "role" must not leave a caller without one), and
// every error names the file and the entry.
package access

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

// Load reads file and parses it with parse; what names the file's kind
// ("API tokens") when it cannot be read, an error then wrapping bad (the
// caller's bad-config sentinel).
func Load[T any](file, what string, bad error, parse func([]byte) ([]T, error)) ([]T, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", bad, what, err)
	}
	l, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return l, nil
}

// Decode decodes b, a YAML list of T, refusing fields T does not have
// with an error wrapping bad. An empty b is an empty list.
func Decode[T any](b []byte, what string, bad error) ([]T, error) {
	var l []T
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&l); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s: %w", bad, what, err)
	}
	return l, nil
}
