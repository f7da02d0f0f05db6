// Package bpf owns the byte counters of the agent's client connections:
// bytes each connection received and sent, and the bytes of requests
// received and not yet answered (in flight). Two implementations sit
// behind one interface, Counters: eBPF programs that count in the kernel
// (counters.c, compiled by bpf2go; the output is committed) and a
// userspace wrapper that counts Read and Write. README.md says what is
// counted where and why.
package bpf

//go:generate go tool bpf2go -target amd64 -output-stem counters counters counters.c -- -O2 -Wall -Werror
