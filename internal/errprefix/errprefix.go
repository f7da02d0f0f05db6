// Package errprefix owns Baton's error-message style across packages: each
// package's sentinel errors start with its own prefix ("agent: ",
// "upstream: "), and an error wrapped inside another message of the same
// package reads without its prefix, so a chain names each package once
// ("agent: no producer id from the destination: upstream: ...", not
// "...: agent: ...").
package errprefix

import "strings"

// Nested is err for wrapping in a message that already starts with prefix:
// its text reads without a leading prefix. errors.Is and errors.As see
// through it. Nested(prefix, nil) is nil.
func Nested(prefix string, err error) error {
	if err == nil {
		return nil
	}
	return nestedError{prefix, err}
}

type nestedError struct {
	prefix string
	err    error
}

func (e nestedError) Error() string { return strings.TrimPrefix(e.err.Error(), e.prefix) }
func (e nestedError) Unwrap() error { return e.err }
