package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/internal/embedded"
)

// TestPlanReadsOverHTTP: GET /v1/clusters answers the clusters the
// control plane was given; GET /v1/source-topics lists the source's
// topics, sorted, through a worker pool's source client; a replication
// that cannot list them, or has no source client, is refused (HTTP 400),
// saying so.
func TestPlanReadsOverHTTP(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	src, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopics(ctx, 1, 1, nil, "zeta", "alpha"); err != nil {
		t.Fatal(err)
	}
	pool, err := replication.NewWorkerPool(adm, 3*time.Second, time.Second, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	clusters := controlplane.Clusters(&batonv1.Cluster{Name: "source", Bootstrap: []string{"s1:9092", "s2:9092"}},
		&batonv1.Cluster{Name: "destination", Bootstrap: []string{"d:9092"}})
	serve := func(repl controlplane.Replication) *Client {
		srv := httptest.NewServer(New(newControlPlane(t, repl, clusters)))
		t.Cleanup(srv.Close)
		return &Client{Base: srv.URL}
	}

	api := serve(pool)
	cv, err := api.Clusters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cv.Source.Name != "source" || !slices.Equal(cv.Source.Bootstrap, []string{"s1:9092", "s2:9092"}) ||
		cv.Destination.Name != "destination" || !slices.Equal(cv.Destination.Bootstrap, []string{"d:9092"}) {
		t.Errorf("clusters: %+v", cv)
	}
	ts, err := api.SourceTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ts, []string{"alpha", "zeta"}) {
		t.Errorf("source topics %v, want [alpha zeta]", ts)
	}

	_, err = serve(idleReplication{}).SourceTopics(ctx)
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(err.Error(), "cannot list the source's topics") {
		t.Errorf("a replication that cannot list topics: %v; want HTTP 400 saying so", err)
	}
	_, err = serve(noSourceClient{}).SourceTopics(ctx)
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(err.Error(), "no source client") {
		t.Errorf("a replication without a source client: %v; want HTTP 400 saying so", err)
	}
}

// noSourceClient is a replication whose topic listing is an in-process
// one's without a source client.
type noSourceClient struct{ idleReplication }

func (noSourceClient) SourceTopics(ctx context.Context) ([]string, error) {
	return (&replication.ReplicatorAdapter{}).SourceTopics(ctx)
}
