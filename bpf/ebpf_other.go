//go:build !linux || !(386 || amd64)

package bpf

// NewEBPF fails here: the programs are compiled for linux/amd64 only.
func NewEBPF() (Counters, error) { return nil, ErrUnsupported }
