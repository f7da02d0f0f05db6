package xds

import (
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// ReconnectBackoff is how a connection to the control plane is redialed
// after it failed: from 100 ms, growing 1.6 times (±20 %) up to a second.
// gRPC's default starts at a second and grows to two minutes; a replica
// elected after the agent last tried every address would then wait up to
// that long to be dialed, while the agent's lease runs out.
var ReconnectBackoff = backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}

// ReplicasTarget is the gRPC target and dial options for control-plane
// replicas at addrs (host:port each): one address as is (a DNS name that
// resolves to several replicas gives each), several through a static
// resolver. Either way the client keeps to one replica and moves to the
// next when it fails, redialing with ReconnectBackoff. Each replica's TLS
// certificate is checked against its own host.
func ReplicasTarget(addrs []string) (string, []grpc.DialOption) {
	opts := []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{Backoff: ReconnectBackoff,
		MinConnectTimeout: 5 * time.Second})}
	if len(addrs) == 1 {
		return addrs[0], opts
	}
	r := manual.NewBuilderWithScheme("baton-replicas")
	state := resolver.State{}
	for _, a := range addrs {
		host, _, _ := net.SplitHostPort(a)
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: host})
	}
	r.InitialState(state)
	return r.Scheme() + ":///" + strings.Join(addrs, ","), append(opts, grpc.WithResolvers(r))
}
