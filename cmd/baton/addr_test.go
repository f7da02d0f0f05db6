package main

import (
	"context"
	"strings"
	"testing"
)

// Every address flag of every command is checked before the command does
// anything: a missing port is refused naming the flag.
func TestAddressFlagsRefused(t *testing.T) {
	t.Parallel()
	ok := []string{"--source", "127.0.0.1:1", "--destination", "127.0.0.1:2"}
	tests := []struct {
		args []string
		flag string
	}{
		{append([]string{"controlplane"}, "--source", "127.0.0.1", "--destination", "127.0.0.1:2"), "--source"},
		{append([]string{"controlplane"}, "--source", "127.0.0.1:1", "--destination", "d:1,d"), "--destination"},
		{append([]string{"controlplane", "--grpc", "127.0.0.1"}, ok...), "--grpc"},
		{append([]string{"controlplane", "--http", "localhost:http"}, ok...), "--http"},
		{append([]string{"controlplane", "--etcd-endpoints", "http://127.0.0.1"}, ok...), "--etcd-endpoints"},
		{append([]string{"agent", "--control-plane", "127.0.0.1"}, ok...), "--control-plane"},
		{append([]string{"agent", "--listen", "9092"}, ok...), "--listen"},
		{append([]string{"agent", "--advertise", ":9092"}, ok...), "--advertise"},
		{append([]string{"agent", "--admin", "127.0.0.1:99999"}, ok...), "--admin"},
		{append([]string{"agent"}, "--source", "127.0.0.1:0", "--destination", "127.0.0.1:2"), "--source"},
		{append([]string{"replicator", "--topics", "t", "--admin", "x"}, ok...), "--admin"},
		{append([]string{"replicator", "--topics", "t"}, "--source", "s:1", "--destination", "[::1]"), "--destination"},
		{append([]string{"verify", "parity", "--topic", "t"}, "--source", "s", "--destination", "d:1"), "--source"},
		{[]string{"topic", "list", "--server", "127.0.0.1:18080"}, "--server"},
		{[]string{"agents", "--server", "ftp://h:1"}, "--server"},
		{[]string{"events", "--server", "http://"}, "--server"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			root := newRootCmd()
			root.SetArgs(tc.args)
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // nothing may start: a command that got past the check stops at once
			err := root.ExecuteContext(ctx)
			if err == nil || !strings.HasPrefix(err.Error(), tc.flag+" ") {
				t.Fatalf("got %v, want an error naming %s", err, tc.flag)
			}
		})
	}
	for _, v := range []string{"127.0.0.1:9092", "a:1,b:2", "[::1]:9092"} {
		if err := checkAddr(addrDial, v); err != nil {
			t.Errorf("%s refused: %v", v, err)
		}
	}
	for _, v := range []string{":9092", "127.0.0.1:0"} {
		if err := checkAddr(addrListen, v); err != nil {
			t.Errorf("listen %s refused: %v", v, err)
		}
	}
	if err := checkAddr(addrEtcd, "https://e1:2379,e2:2379"); err != nil {
		t.Error(err)
	}
}
