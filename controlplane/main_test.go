package controlplane

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
)

// etcdChildEnv makes the test binary an embedded etcd on the directory it
// names (see startEtcdProcess): a process of its own can be stalled with
// SIGSTOP, which an etcd inside the test process cannot.
const etcdChildEnv = "BATON_TEST_ETCD_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(etcdChildEnv); dir != "" {
		os.Exit(runEtcdChild(dir))
	}
	os.Exit(m.Run())
}

// runEtcdChild serves etcd on dir, prints its client endpoint and runs
// until its stdin closes (the parent ended it, or died).
func runEtcdChild(dir string) int {
	s, err := OpenEmbedded(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	fmt.Println(s.cli.Endpoints()[0])
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}
