package replicas

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
)

// Lifecycle is one control-plane process from its start to its stop
// (`baton controlplane`). With Elect (replicas on an external etcd) it
// serves xDS and leases on GRPC as a follower from the state in etcd and
// campaigns; once elected the same gRPC connections switch to the leader.
// Without Elect the process is the only one and leads from the start. A
// leader builds its term (Lead), serves the HTTP API (API) on HTTP and
// /metrics on Admin, replicates and runs the control plane until ctx ends
// or it loses the election.
type Lifecycle struct {
	// Store is the control plane's etcd; the caller closes it after Run.
	Store *controlplane.EtcdStore
	// Elect: replicas sharing Store elect a leader.
	Elect bool
	// ReplicaID is this replica's name in the election.
	ReplicaID string
	// LeaderTTL is the TTL of this replica's election session: a dead
	// leader is replaced after about this long, and a term's TakeoverMargin.
	LeaderTTL time.Duration
	// Follow are the follower's options (NewFollower); they must match
	// the ones Lead gives New.
	Follow []controlplane.Opt
	// FollowerReplication: the follower's gRPC server also has the
	// Replication service (replicator workers), answered by the leader's
	// replication once this replica is elected.
	FollowerReplication bool

	// GRPC is the listen address of xDS and the Lease service, GRPCCreds
	// its transport credentials.
	GRPC      string
	GRPCCreds credentials.TransportCredentials
	// HTTP is the listen address of the HTTP API, served with HTTPTLS
	// when it is not nil.
	HTTP    string
	HTTPTLS *tls.Config
	// API builds the handler of the HTTP API for a term's control plane
	// (httpapi.New). It MUST be set: Run refuses to start without it
	// (controlplane.ErrBadConfig), as a leader that answered no API could
	// not be operated.
	API func(*controlplane.ControlPlane) http.Handler
	// Admin is the listen address of Metrics at /metrics; "" for none.
	Admin   string
	Metrics http.Handler

	// Lead builds the term of this process as leader: called once
	// elected (at once without Elect), with the TakeoverMargin the term's
	// control plane and replication need. Its control plane, on Store
	// with a ReplicaID, needs controlplane.WithRecords(NewRecords(...)).
	Lead func(ctx context.Context, takeoverMargin time.Duration) (*Term, error)
	// Marker, if not nil, is told when this replica serves as the leader
	// and when it stops.
	Marker LeaderMarker
	Log    *slog.Logger
}

// Term is what a replica runs while it leads.
type Term struct {
	CP *controlplane.ControlPlane
	// Replicate copies the managed topics until its context, the term's,
	// ends.
	Replicate func(context.Context)
	// Workers answers the Replication service while the term lasts: the
	// replication.WorkerPool CP replicates with; nil when replication is
	// in process.
	Workers batonv1.ReplicationServer
}

// LeaderMarker tells whatever routes the HTTP API to the leader (a
// Kubernetes pod label) where it is served.
type LeaderMarker interface {
	// Serving is called once this replica, elected, serves the HTTP API.
	Serving(ctx context.Context)
	// StepDown is called when this replica stops leading, also when its
	// start fails once elected; it may be called more than once.
	StepDown()
}

// ListenError is a listener Run could not open. Port names its field of
// Lifecycle: "grpc", "http" or "admin".
type ListenError struct {
	Port string
	Err  error
}

func (e *ListenError) Error() string { return e.Port + " listener: " + e.Err.Error() }

func (e *ListenError) Unwrap() error { return e.Err }

// grpcServing is the gRPC server of a process and what it serves.
type grpcServing struct {
	srv *grpc.Server
	ln  net.Listener
	// leases and repl answer for the follower, then for the leader;
	// set only with Elect (without, the leader registers itself).
	leases *LeaseSwitch
	repl   *ReplicationSwitch
	// stopFollower stops the follower and waits for it.
	stopFollower func()
}

// Run runs the process until ctx ends (nil, also when it ends while
// following) or the leader's term fails or is lost (an error).
func (l *Lifecycle) Run(ctx context.Context) error {
	if l.API == nil {
		return fmt.Errorf("%w: Lifecycle.API is not set: no handler for the HTTP API", controlplane.ErrBadConfig)
	}
	var (
		lead *Leadership
		g    *grpcServing
	)
	if l.Elect {
		var err error
		if g, err = l.serveFollowing(ctx); err != nil {
			return err
		}
		defer g.srv.Stop()
		lead, err = l.campaign(ctx, g)
		if err != nil && ctx.Err() != nil {
			return nil // stopped while following
		}
		if err != nil {
			return err
		}
		l.Log.Info("elected leader", "replica", l.ReplicaID)
		if l.Marker != nil {
			defer l.Marker.StepDown() // also on a start that fails from here on
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_ = lead.Resign(rctx)
		}()
	}
	var margin time.Duration
	if lead != nil {
		margin = l.LeaderTTL // a replica that led before this one may still have granted leases for its session's TTL
	}
	term, err := l.Lead(ctx, margin)
	if err != nil {
		return err
	}
	if g, err = l.serveLeader(g, term); err != nil {
		return err
	}
	return l.lead(ctx, lead, g, term)
}

// serveFollowing starts a follower and serves it on GRPC: xDS and leases
// from the state in etcd; the leader's services replace its own there once
// elected, on the same connections.
func (l *Lifecycle) serveFollowing(ctx context.Context) (*grpcServing, error) {
	fol, err := NewFollower(ctx, l.Store, l.Follow...)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", l.GRPC)
	if err != nil {
		return nil, &ListenError{Port: "grpc", Err: err}
	}
	g := &grpcServing{srv: grpc.NewServer(append(fol.ServerOptions(), grpc.Creds(l.GRPCCreds))...), ln: ln,
		leases: &LeaseSwitch{}, repl: &ReplicationSwitch{}}
	fol.XDS().Register(g.srv)
	batonv1.RegisterLeaseServer(g.srv, g.leases)
	if l.FollowerReplication {
		batonv1.RegisterReplicationServer(g.srv, g.repl)
	}
	g.leases.Set(fol)
	go func() { _ = g.srv.Serve(ln) }()
	fctx, stopFollowing := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() { defer close(followed); _ = fol.Run(fctx) }()
	g.stopFollower = func() { stopFollowing(); <-followed }
	l.Log.Info("following: serving xDS and leases from the state in etcd, campaigning for leader",
		"replica", l.ReplicaID, "grpc", ln.Addr().String(), "etcd", strings.Join(l.Store.Endpoints(), ","))
	return g, nil
}

// campaign waits to be elected. The follower stops first: no grant of its
// after this, the leader's start reads them all.
func (l *Lifecycle) campaign(ctx context.Context, g *grpcServing) (*Leadership, error) {
	lead, err := Campaign(ctx, l.Store, Replica{ID: l.ReplicaID, GRPC: g.ln.Addr().String(), Started: time.Now()},
		l.LeaderTTL) // the HTTP API is served once elected
	g.leases.Set(nil)
	g.stopFollower()
	return lead, err
}

// serveLeader serves the term on gRPC: on the follower's server g,
// through its switches, or without Elect (g nil) on a server of its own.
func (l *Lifecycle) serveLeader(g *grpcServing, term *Term) (*grpcServing, error) {
	cp := term.CP
	if g != nil {
		g.leases.Set(cp)
		if term.Workers != nil {
			g.repl.Set(term.Workers)
		}
		return g, nil
	}
	ln, err := net.Listen("tcp", l.GRPC)
	if err != nil {
		return nil, &ListenError{Port: "grpc", Err: err}
	}
	g = &grpcServing{srv: grpc.NewServer(append(cp.ServerOptions(), grpc.Creds(l.GRPCCreds))...), ln: ln}
	cp.XDS().Register(g.srv)
	batonv1.RegisterLeaseServer(g.srv, cp)
	if term.Workers != nil {
		batonv1.RegisterReplicationServer(g.srv, term.Workers)
	}
	go func() { _ = g.srv.Serve(ln) }()
	return g, nil
}

// lead serves the HTTP API and the admin endpoints, replicates and runs the
// term's control plane until ctx ends or lead (nil without Elect) is lost,
// then stops serving.
func (l *Lifecycle) lead(ctx context.Context, lead *Leadership, g *grpcServing, term *Term) error {
	hln, err := net.Listen("tcp", l.HTTP)
	if err != nil {
		return &ListenError{Port: "http", Err: err}
	}
	hs := &http.Server{Handler: l.API(term.CP), ReadHeaderTimeout: 5 * time.Second, TLSConfig: l.HTTPTLS}
	api := "http://" + hln.Addr().String()
	serve := func() error { return hs.Serve(hln) }
	if l.HTTPTLS != nil {
		api = "https://" + hln.Addr().String()
		serve = func() error { return hs.ServeTLS(hln, "", "") } // the certificate is in TLSConfig
	}
	if l.Admin != "" {
		closeAdmin, err := l.serveAdmin()
		if err != nil {
			return err
		}
		defer closeAdmin()
	}
	go func() { _ = serve() }()
	// The replicator stops with the term: a replica that lost the
	// election copies nothing more once it knows.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go term.Replicate(runCtx)
	if lead != nil {
		if err := lead.Serving(ctx, g.ln.Addr().String(), api); err != nil {
			l.Log.Warn("recording this replica's addresses for `baton controlplane status`", "err", err)
		}
	}
	l.Log.Info("control plane up", "grpc", g.ln.Addr().String(), "http", api)
	if l.Marker != nil && lead != nil {
		l.Marker.Serving(ctx) // only now: the API Service must not route to a replica not serving yet
	}
	lost := make(chan struct{})
	if lead != nil {
		go func() {
			select {
			case <-lead.Lost():
				close(lost)
				stop()
			case <-runCtx.Done():
			}
		}()
	}
	err = term.CP.Run(runCtx)
	select {
	case <-lost:
		err = errors.New("lost the leader election (the etcd session expired: etcd out of reach, or this process stalled): " +
			"another replica leads now; this one wrote nothing since and exits for its supervisor to restart it as a follower")
	default:
	}
	if l.Marker != nil {
		l.Marker.StepDown() // before the API stops answering
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	g.srv.Stop()
	return err
}

// serveAdmin serves Metrics at /metrics on Admin until the returned
// function closes it.
func (l *Lifecycle) serveAdmin() (func(), error) {
	aln, err := net.Listen("tcp", l.Admin)
	if err != nil {
		return nil, &ListenError{Port: "admin", Err: err}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", l.Metrics)
	as := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = as.Serve(aln) }()
	l.Log.Info("admin endpoints", "metrics", "http://"+aln.Addr().String()+"/metrics")
	return func() { _ = as.Close() }, nil
}
