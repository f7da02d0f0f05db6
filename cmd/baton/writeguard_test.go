package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/internal/embedded"
)

// TestPickGuard: on a destination with an authorizer (kfake answers
// DescribeACLs), --write-guard=auto runs without a guard for an anonymous
// replicator, saying why and what to do, and with ACLs for a named one;
// a principal no guard can work with, and an explicit acl guard that
// cannot work, are refused naming the flags.
func TestPickGuard(t *testing.T) {
	t.Parallel()
	dst, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(dst.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	for _, tc := range []struct {
		mode, principal string
		want            string   // "acl", "none", or "" for an error
		says            []string // what the NoGuard's Why and Remedy, or the error, say
	}{
		{"auto", "User:repl", "acl", nil},
		{"auto", "User:ANONYMOUS", "none", []string{"User:ANONYMOUS", "not write-protected", "SASL or mTLS", "--replicator-principal"}},
		{"auto", "", "", []string{"--replicator-principal", "none named"}},
		{"auto", "User:*", "", []string{"--replicator-principal", `"User:*"`}},
		{"acl", "User:ANONYMOUS", "", []string{"--write-guard=acl", "--replicator-principal", `"User:ANONYMOUS"`}},
		{"acl", "", "", []string{"--write-guard=acl", "--replicator-principal", "none named"}},
		{"acl", "User:repl", "acl", nil},
		{"none", "User:ANONYMOUS", "none", []string{"--write-guard=none"}},
		{"acls", "User:repl", "", []string{"--write-guard", `"acls"`}},
	} {
		t.Run(fmt.Sprintf("%s %q", tc.mode, tc.principal), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			g, err := pickGuard(ctx, tc.mode, adm, tc.principal)
			var got, said string
			switch g := g.(type) {
			case *acl.Guard:
				got = "acl"
			case controlplane.NoGuard:
				got, said = "none", g.Why+" "+g.Remedy
			}
			if err != nil {
				said = err.Error()
			}
			if got != tc.want || (tc.want == "") != (err != nil) {
				t.Fatalf("pickGuard = %#v, %v; want %q", g, err, tc.want)
			}
			for _, s := range tc.says {
				if !strings.Contains(said, s) {
					t.Errorf("%q does not say %s", said, s)
				}
			}
		})
	}
}
