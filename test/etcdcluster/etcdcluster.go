// Package etcdcluster owns the multi-member etcd clusters tests start: real
// etcd servers (etcd's embed package) in the test's process, on loopback,
// in the test's temporary directory. It is for tests only.
package etcdcluster

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Cluster is a running etcd cluster.
type Cluster struct {
	members   []*embed.Etcd
	endpoints []string
}

// Start starts an n-member cluster and waits until every member is ready;
// t.Cleanup stops it.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	ports := make([]int, 2*n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	var initial []string
	cfgs := make([]*embed.Config, n)
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = t.TempDir()
		cfg.LogLevel = "fatal" // a clean Close logs at error
		cu, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(ports[2*i]))
		pu, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(ports[2*i+1]))
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.InitialClusterToken = "baton-test"
		initial = append(initial, cfg.Name+"="+pu.String())
		cfgs[i] = cfg
	}
	c := &Cluster{}
	t.Cleanup(c.stop)
	for _, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			t.Fatalf("etcd member %s: %v", cfg.Name, err)
		}
		c.members = append(c.members, e)
		c.endpoints = append(c.endpoints, cfg.AdvertiseClientUrls[0].String())
	}
	for i, e := range c.members {
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			t.Fatalf("etcd member %d: %v", i, err)
		case <-time.After(2 * time.Minute):
			t.Fatalf("etcd member %d not ready after 2 minutes", i)
		}
	}
	return c
}

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string { return c.endpoints }

func (c *Cluster) stop() {
	for _, e := range c.members {
		e.Close()
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
