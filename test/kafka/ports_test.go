package kafka

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-kafka/baton/internal/embedded"
)

func TestReservePortsNeverOverlap(t *testing.T) {
	t.Parallel()
	high := ephemeralLow()
	if high-portRangeLow < minPortRange {
		t.Skipf("the ephemeral range starts at %d, too low for reserved ports; the harness falls back to bind(0)", high)
	}
	held := map[int]bool{}
	var all []portLocks
	defer func() {
		for _, l := range all {
			l.release()
		}
	}()
	// Several clusters' worth, as parallel test binaries would take them.
	for range 5 {
		ports, locks, err := reservePorts(6)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, locks)
		if len(ports) != 6 || len(locks) != 6 {
			t.Fatalf("got %d ports and %d locks, want 6 each", len(ports), len(locks))
		}
		for _, p := range ports {
			if p < portRangeLow || p >= high {
				t.Errorf("port %d outside [%d, %d): bind(0) or an outgoing connection could take it", p, portRangeLow, high)
			}
			if held[p] {
				t.Errorf("port %d reserved twice", p)
			}
			held[p] = true
		}
	}

	// A reserved port is skipped by the next reservation even though it
	// is free to bind (the JVM has not bound it yet).
	for p := range held {
		if _, err := lockPort(portLockDir(), p); err == nil {
			t.Errorf("port %d could be locked again while reserved", p)
		}
		break
	}
}

func TestReservePortsSkipsBoundPorts(t *testing.T) {
	t.Parallel()
	if ephemeralLow()-portRangeLow < minPortRange {
		t.Skip("the ephemeral range starts too low for reserved ports")
	}
	// Bind a port in the range the way a foreign server would, without a
	// lock file; reservations must not hand it out.
	var l net.Listener
	for p := portRangeLow + 7919; p < ephemeralLow(); p += 101 {
		var err error
		if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			break
		}
	}
	if l == nil {
		t.Fatal("could not bind any port in the range")
	}
	defer l.Close()
	if portFree(l.Addr().(*net.TCPAddr).Port) {
		t.Fatalf("portFree says %s is free while it is bound", l.Addr())
	}
}

// TestReadyRefusesAForeignCluster: a cluster whose ports are answered by
// another cluster's brokers is not ready, whatever they list.
func TestReadyRefusesAForeignCluster(t *testing.T) {
	t.Parallel()
	foreign, err := embedded.Start(embedded.Brokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	c := &Cluster{clusterID: "baton-test-cluster"}
	for i, addr := range strings.Split(foreign.Bootstrap(), ",") {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		c.nodes = append(c.nodes, Node{ID: i, Port: p})
	}
	err = c.Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "answers for cluster") {
		t.Fatalf("Ready on a foreign cluster's ports = %v, want an error naming the foreign cluster id", err)
	}
}
