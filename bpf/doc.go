// Package bpf will own the eBPF programs that count in-flight bytes per
// producer connection, their bpf2go output, and the Counters interface with
// a userspace fallback. Nothing is built here yet.
package bpf
