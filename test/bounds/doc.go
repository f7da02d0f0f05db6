// Package bounds holds the acceptance test of the agent's memory bounds
// (go test ./test/bounds/): a real `baton agent` process, built by the
// test, under connections that declare huge frames and send a trickle,
// with its resident memory read from /proc while kcat keeps producing and
// consuming through it.
//
// The package has no API: everything is in its _test.go files.
package bounds
