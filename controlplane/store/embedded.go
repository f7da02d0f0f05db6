package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/baton-kafka/baton/internal/dirlock"
)

// An embedded etcd: a single node on loopback ports, its data directory
// locked while it runs.

// LockFile is the file in an embedded etcd's data directory that the
// running control plane holds an flock on, with its pid inside.
const LockFile = "baton.lock"

// OpenEmbedded starts a single-node etcd keeping its data in dir (created if
// missing; reused across restarts) on loopback ports, and connects to it.
// A directory another process uses is refused at once with
// ErrDataDirLocked, naming that process: etcd itself would wait forever
// for its database file's lock.
func OpenEmbedded(ctx context.Context, dir string) (*EtcdStore, error) {
	lock, err := lockDataDir(dir)
	if err != nil {
		return nil, err
	}
	s, err := openEmbedded(ctx, dir)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	s.lock = lock
	return s, nil
}

// lockDataDir takes the data directory's lock (internal/dirlock): the
// kernel drops it when the process dies, so a crashed control plane leaves
// nothing to clean up.
func lockDataDir(dir string) (*os.File, error) {
	f, err := dirlock.Lock(dir, LockFile)
	if errors.Is(err, dirlock.ErrLocked) {
		return nil, fmt.Errorf("%w: %w; stop it or use another data directory", ErrDataDirLocked, err)
	}
	if err != nil {
		return nil, fmt.Errorf("controlplane: data dir: %w", err)
	}
	return f, nil
}

func openEmbedded(ctx context.Context, dir string) (*EtcdStore, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	// etcd logs "server closed" at level error on every clean Close; what
	// goes wrong at start still comes back as an error from StartEtcd or
	// the readiness wait below.
	cfg.LogLevel = "fatal"
	cfg.Logger = "zap"
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	cu, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(ports[0]))
	pu, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(ports[1]))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("controlplane: embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, errors.New("controlplane: embedded etcd did not become ready in 30s")
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	s, err := OpenEtcd(ctx, []string{cu.String()})
	if err != nil {
		e.Close()
		return nil, err
	}
	s.emb = e
	return s, nil
}

func freePorts(n int) ([]int, error) {
	var out []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
