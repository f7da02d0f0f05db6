package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/baton-kafka/baton/internal/podlabel"
)

// leaderLabel keeps a label on this replica's pod saying whether it serves
// the HTTP API as the leader: "false" from the start (a pod restarted
// after leading must not be routed to), "true" once elected and serving,
// "false" again when it steps down. A Service selecting label=true then
// sends the HTTP API, which only the leader serves, to the leader alone.
// Before it labels its own pod true, a new leader labels its peers' pods
// false: a former leader that stalled (its pod still passes a TCP probe)
// must not stay selected beside it.
type leaderLabel struct {
	pod   *podlabel.Pod
	key   string
	peers []string
	log   *slog.Logger
	stop  context.CancelFunc
	done  sync.WaitGroup
	once  sync.Once
}

// startLabelBudget is how long a replica's start tries to label its pod
// "false" through API server hiccups before it gives up.
const startLabelBudget = 30 * time.Second

// newLeaderLabel checks --leader-label and --leader-label-peers and labels
// the pod "false"; nil when --leader-label is not given. A pod the label
// cannot be set on (no service account, no RBAC) is refused at the start,
// naming the flag; an API server out of reach or answering 5xx is retried
// for startLabelBudget first.
func newLeaderLabel(ctx context.Context, key, peers, endpoints string, log *slog.Logger) (*leaderLabel, error) {
	if key == "" {
		if peers != "" {
			return nil, errors.New("--leader-label-peers: needs --leader-label")
		}
		return nil, nil
	}
	if endpoints == "" {
		return nil, fmt.Errorf("--leader-label: needs --etcd-endpoints (a replica with the embedded etcd is the only one, always the leader)")
	}
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return nil, fmt.Errorf("--leader-label: %q is not a label key: %s", key, strings.Join(errs, "; "))
	}
	pod, err := podlabel.InCluster()
	if err != nil {
		return nil, fmt.Errorf("--leader-label: %w", err)
	}
	l := &leaderLabel{pod: pod, key: key, log: log}
	for _, p := range splitList(peers) {
		if errs := validation.IsDNS1123Subdomain(p); len(errs) > 0 {
			return nil, fmt.Errorf("--leader-label-peers: %q is not a pod name: %s", p, strings.Join(errs, "; "))
		}
		if p != pod.Name && !slices.Contains(l.peers, p) {
			l.peers = append(l.peers, p)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, startLabelBudget)
	defer cancel()
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		err = pod.Set(sctx, key, "false")
		if err == nil {
			break
		}
		if !podlabel.Temporary(err) || sctx.Err() != nil {
			var hint string
			if ae := (*podlabel.APIError)(nil); errors.As(err, &ae) && ae.Code == http.StatusForbidden {
				hint = " (the pod's service account needs patch on pods)"
			}
			return nil, fmt.Errorf("--leader-label: labelling pod %s/%s %s=false: %w%s", pod.Namespace, pod.Name, key, err, hint)
		}
		log.Info("labelling this pod not the leader: the Kubernetes API did not answer; retrying", "err", err)
		select {
		case <-sctx.Done():
		case <-time.After(backoff):
		}
	}
	log.Info("pod labelled: not the leader", "pod", pod.Namespace+"/"+pod.Name, "label", key+"=false")
	return l, nil
}

// Serving labels the peers' pods "false", then this pod "true", retrying
// in the background until done or StepDown; a failure is logged at WARN
// once: meanwhile the API Service routes to no replica. A peer pod that
// does not exist (fewer replicas) is done.
func (l *leaderLabel) Serving(ctx context.Context) {
	ctx, l.stop = context.WithCancel(ctx)
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		peers := slices.Clone(l.peers)
		warned := false
		for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
			err := l.label(ctx, &peers)
			if err == nil {
				l.log.Info("pod labelled: the leader", "pod", l.pod.Namespace+"/"+l.pod.Name, "label", l.key+"=true")
				return
			}
			if ctx.Err() != nil {
				return
			}
			if !warned {
				l.log.Warn("cannot label this pod the leader: the HTTP API's Service routes to no replica until it is; retrying. "+
					"Check that the pod's service account may patch the control plane's pods", "label", l.key, "err", err)
				warned = true
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
	}()
}

// label unlabels the peers left in peers (dropping each one done), then
// labels this pod the leader.
func (l *leaderLabel) label(ctx context.Context, peers *[]string) error {
	for len(*peers) > 0 {
		p := (*peers)[0]
		if err := l.pod.Other(p).Set(ctx, l.key, "false"); err != nil && !podlabel.NotFound(err) {
			return fmt.Errorf("peer %s: %w", p, err)
		}
		*peers = (*peers)[1:]
	}
	return l.pod.Set(ctx, l.key, "true")
}

// StepDown stops Serving's retries and labels the pod "false", trying for
// 2 s: a replica that cannot leaves that to its successor process in the
// pod (newLeaderLabel), to the next leader (Serving), or to the pod's
// deletion. Called more than once, it acts once.
func (l *leaderLabel) StepDown() {
	l.once.Do(func() {
		if l.stop != nil {
			l.stop()
		}
		l.done.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := l.pod.Set(ctx, l.key, "false"); err != nil {
			l.log.Warn("cannot label this pod not the leader while stepping down; the next leader or the next process in the pod does", "err", err)
		}
	})
}
