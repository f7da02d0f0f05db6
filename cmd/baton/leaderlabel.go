package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/baton-kafka/baton/internal/podlabel"
)

// leaderLabel keeps a label on this replica's pod saying whether it leads:
// "false" from the start (a pod restarted after leading must not be routed
// to), "true" once elected, "false" again when it steps down. A Service
// selecting label=true then sends the HTTP API, which only the leader
// serves, to the leader alone.
type leaderLabel struct {
	pod  *podlabel.Pod
	key  string
	log  *slog.Logger
	stop context.CancelFunc
	done sync.WaitGroup
}

// newLeaderLabel checks --leader-label and labels the pod "false"; nil
// when the flag is not given. A pod the label cannot be set on (no
// service account, no RBAC) is refused at the start, naming the flag.
func newLeaderLabel(ctx context.Context, key, endpoints string, log *slog.Logger) (*leaderLabel, error) {
	if key == "" {
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
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := pod.Set(sctx, key, "false"); err != nil {
		return nil, fmt.Errorf("--leader-label: labelling pod %s/%s %s=false: %w (the pod's service account needs patch on pods)",
			pod.Namespace, pod.Name, key, err)
	}
	log.Info("pod labelled: not the leader", "pod", pod.Namespace+"/"+pod.Name, "label", key+"=false")
	return l, nil
}

// elected labels the pod "true", retrying in the background until it
// holds or stepDown; a failure is logged at WARN once: meanwhile the API
// Service routes to no replica.
func (l *leaderLabel) elected(ctx context.Context) {
	ctx, l.stop = context.WithCancel(ctx)
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		warned := false
		for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
			err := l.pod.Set(ctx, l.key, "true")
			if err == nil {
				l.log.Info("pod labelled: the leader", "pod", l.pod.Namespace+"/"+l.pod.Name, "label", l.key+"=true")
				return
			}
			if ctx.Err() != nil {
				return
			}
			if !warned {
				l.log.Warn("cannot label this pod the leader: the HTTP API's Service routes to no replica until it is; retrying. "+
					"Check that the pod's service account may patch pods", "label", l.key+"=true", "err", err)
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

// stepDown stops elected's retries and labels the pod "false", trying for
// 2 s: a replica exiting for good leaves that to its successor process
// (newLeaderLabel), or to the pod's deletion.
func (l *leaderLabel) stepDown() {
	if l.stop != nil {
		l.stop()
	}
	l.done.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.pod.Set(ctx, l.key, "false"); err != nil {
		l.log.Warn("cannot label this pod not the leader while stepping down; the next process in the pod does", "err", err)
	}
}
